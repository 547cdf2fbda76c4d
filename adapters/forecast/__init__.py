"""Whole-call forecasting as a ``SamplingRun`` (``forecast_run``): a forecast step runs none of the
blocks, the final layer gets a forecast of their output.

- ``forecast_settings``: the node's settings, its named presets, the plan of one run;
- ``forecast_schedule``: which steps compute; ``feature_forecast``: the forecasters and each stream's history.

Never imports ``dbcache``.
"""
