"""Krea-2 files in diffusers' and GGUF formats, loaded for ComfyUI's sampler.

- ``krea2_checkpoint``: what every Krea-2 loader shares (key names, config, filling the model, errors);
- ``krea2_diffusers``, ``krea2_gguf``: the safetensors and the GGUF loader;
- ``krea2_listing``: which Krea-2 files and folders the loader node lists.
"""
