"""DBCache: cache-dit's block cache as a ``SamplingRun`` (``cache_run``).

- ``settings``: the node's DBCache settings and step masks, planned per run;
- ``cache_dit_bridge``: cache-dit's lifetime on the module (the one module that uses cache-dit's
  internals), ``cache_dit_logs``: cache-dit quiet during a run;
- ``block_probe``: the block hooks, ``paired_hidden``: a (video, audio) pair as one tensor;
- ``residual_trace``, ``decision_rules``, ``threshold_advisor``: each stream's Fn residual change,
  cache-dit's rules replayed for each step's reason, which thresholds would have cached what;
- ``calibrators``: cache-dit's calibrators as the node offers them.

Never imports ``forecast``.
"""
