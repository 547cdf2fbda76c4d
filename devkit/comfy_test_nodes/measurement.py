"""Routes the benchmarks read from the server process: CUDA peak memory and torch.compile counters.

A benchmark drives ComfyUI over HTTP, so what only the server process knows
(``torch.cuda.max_memory_allocated``, dynamo's counters) is served here. The
server runs one prompt at a time: reset the peak, run a prompt, read it.
"""

import torch
from aiohttp import web

MEMORY_ROUTE = "/krea2_test/cuda_memory"
COMPILE_ROUTE = "/krea2_test/compile_counters"


def cuda_memory() -> dict:
    if not torch.cuda.is_available():
        return {"device": None, "peak_allocated": None, "peak_reserved": None}
    return {"device": torch.cuda.get_device_name(), "peak_allocated": torch.cuda.max_memory_allocated(),
            "peak_reserved": torch.cuda.max_memory_reserved()}


def compile_counters() -> dict:
    """Graphs dynamo compiled, graph breaks and recompilations so far (cumulative)."""
    from torch._dynamo.utils import counters

    return {"unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": sum(counters["graph_break"].values()),
            "recompiles": sum(counters["recompiles"].values())}


def register(routes):
    @routes.get(MEMORY_ROUTE)
    async def read_cuda_memory(request):
        return web.json_response(cuda_memory())

    @routes.post(MEMORY_ROUTE)
    async def reset_cuda_memory(request):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        return web.json_response(cuda_memory())

    @routes.get(COMPILE_ROUTE)
    async def read_compile_counters(request):
        return web.json_response(compile_counters())
