"""The pack's logic, kept free of ComfyUI imports.

- ``registry``: which transformer classes are supported and where their blocks are;
- ``krea2_checkpoint``: what every Krea-2 loader shares (key names, config, filling the model, errors);
- ``krea2_diffusers``, ``krea2_gguf``: the safetensors and the GGUF loader, built on ``krea2_checkpoint``;
- ``krea2_listing``: which Krea-2 files and folders the loader node lists;
- ``settings``: node settings and step masks, resolved per run;
- ``calibrators``: cache-dit's calibrators as the node offers them;
- ``step_clock``: which sampling step a model call belongs to;
- ``cache_run``: cache-dit on one transformer for exactly one sampling run, composed of:
  ``cache_dit_bridge`` (cache-dit's lifetime on the module; the one module that uses cache-dit's
  internals), ``call_router`` (each call's step and stream, and whether the cache serves it),
  ``block_probe`` (the block hooks), ``text_path`` (the text path computed once per batch of conds)
  and ``foreign_serves`` (calls another step cache answered, seen by their effect);
- ``multi_device``: a ``CacheRun`` per device copy and one caching decision per step;
- ``cache_dit_logs``: cache-dit quiet during a run (a logger filter, no level changes);
- ``observation``: what a run saw (calls, layouts, traces, warnings), handed out when it ends;
- ``residual_trace``: each stream's Fn residual change, as cache-dit compares it;
- ``decision_rules``: cache-dit's caching rules, replayed for each step's reason;
- ``threshold_advisor``: which thresholds would have cached which steps;
- ``run_record``: the record built from a run's observations (the log, the HTTP route and the UI share it);
- ``strict_json``: everything published is strict JSON (non-finite numbers become null);
- ``image_compare``: MAE, PSNR and a difference heatmap of two images (the compare node).

The seeded-random Krea-2 checkpoints that tests, demos and benchmarks use are not part of the
runtime package: they live in ``devkit/krea2_synthetic.py``.
"""
