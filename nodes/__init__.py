"""ComfyUI nodes: thin translations from node inputs to adapter calls.

Imported only by ComfyUI (through ``comfy_entrypoint``), always relatively:
this folder must never be importable as a top-level ``nodes`` (ComfyUI has its own).
"""

from comfy_api.latest import ComfyExtension, io

from .cache_node import CacheDiTDBCache, Krea2CacheDiT
from .compare_node import Krea2CompareImages
from .forecast_node import CacheDiTSpectrum
from .loader_node import Krea2DiffusersLoader
from . import input_checks, routes

NODES = [Krea2CacheDiT, CacheDiTDBCache, CacheDiTSpectrum, Krea2DiffusersLoader, Krea2CompareImages]


class Krea2CacheDiTExtension(ComfyExtension):
    async def on_load(self) -> None:
        routes.register()
        input_checks.install(NODES)

    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return NODES
