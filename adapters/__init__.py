"""The pack's logic, kept free of ComfyUI imports.

- ``registry``: which transformer classes are supported and where their blocks are;
- ``krea2_checkpoint``: what every Krea-2 loader shares (key names, config, filling the model, errors);
- ``krea2_diffusers``, ``krea2_gguf``: the safetensors and the GGUF loader, built on ``krea2_checkpoint``;
- ``krea2_listing``: which Krea-2 files and folders the loader node lists;
- ``settings``: node settings and step masks, resolved per run;
- ``step_clock``: which sampling step a model call belongs to;
- ``cache_run``: cache-dit enabled for exactly one sampling run, and each call routed;
- ``diagnostics``: residual changes as cache-dit compares them, per-step reasons, the threshold advisor;
- ``run_record``: a finished run's record (call timing, diagnostics, estimate);
- ``stats``: what a run cached, as served to the log, the HTTP route and the UI;
- ``image_compare``: MAE, PSNR and a difference heatmap of two images (the compare node).

The seeded-random Krea-2 checkpoints that tests, demos and benchmarks use are not part of the
runtime package: they live in ``tests/krea2_synthetic.py``.
"""
