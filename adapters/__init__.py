"""The pack's logic, kept free of ComfyUI imports, one package per concern.

- ``families``: the registry, every family fact in one declarative table;
- ``sampling``: what every method's run shares (``SamplingRun``, the step clock, the call router,
  several devices, the observation);
- ``dbcache``: cache-dit's DBCache as a run; ``forecast``: whole-call forecasting as a run
  (they never import each other);
- ``methods``: the methods the nodes offer, behind one face (a check, a plan, a run);
- ``record``: the record built from a run's observations (imports no method);
- ``krea2_loader``: Krea-2 files in diffusers' and GGUF formats;
- ``image_compare``: MAE, PSNR and a difference heatmap of two images (the compare node).

The data path: node -> MODEL clone with the holder and wrappers (``nodes/wrappers.py``) ->
``Method.open_run`` -> ``SamplingRun.model_call`` per model call -> cache-dit or the forecast ->
the sampler; at the end ``run_record.build``. The seeded-random Krea-2 checkpoints that tests,
demos and benchmarks use are not part of the runtime package: ``devkit/krea2_synthetic.py``.
"""
