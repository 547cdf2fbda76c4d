"""Cache-DiT for ComfyUI.

ComfyUI imports this folder as a package and calls ``comfy_entrypoint``. Nothing
here imports ComfyUI at import time, so the pack's adapters can be used (and
tested) without a ComfyUI install.
"""

WEB_DIRECTORY = "./web"


async def comfy_entrypoint():
    from .nodes import Krea2CacheDiTExtension

    return Krea2CacheDiTExtension()


__all__ = ["WEB_DIRECTORY", "comfy_entrypoint"]
