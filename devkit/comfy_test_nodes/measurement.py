"""Routes the benchmarks read from the server process: CUDA peak memory, torch.compile counters and
the tensors alive in the process.

A benchmark drives ComfyUI over HTTP, so what only the server process knows
(``torch.cuda.max_memory_allocated``, dynamo's counters) is served here. The
server runs one prompt at a time: reset the peak, run a prompt, read it.
"""

import gc

import torch
from aiohttp import web

MEMORY_ROUTE = "/krea2_test/cuda_memory"
COMPILE_ROUTE = "/krea2_test/compile_counters"
TENSOR_ROUTE = "/krea2_test/tensor_memory"


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


def tensor_memory() -> dict:
    """The tensors alive in the process after a full garbage collection, by device: their count and
    the bytes of their distinct storages (views and parameters sharing a storage count once).

    torch keeps no count of its CPU allocations (``torch.cuda.memory_allocated`` is CUDA's only), so
    on the CPU this is the figure of what torch holds: every tensor Python can reach (tensors held
    only inside C++ are not seen). ``cuda_allocated`` is torch's own CUDA figure, None without CUDA.
    """
    gc.collect()
    storages: dict[tuple[str, int], int] = {}
    tensors: dict[str, int] = {}
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, torch.Tensor) or obj.is_meta:
                continue
            storage = obj.untyped_storage()
            device = str(storage.device)
            storages[(device, storage.data_ptr())] = storage.nbytes()
        except Exception:  # fake, functional or sparse tensors without a plain storage
            continue
        tensors[device] = tensors.get(device, 0) + 1
    by_device: dict[str, dict] = {}
    for (device, _), nbytes in storages.items():
        entry = by_device.setdefault(device, {"tensors": tensors[device], "storages": 0, "bytes": 0})
        entry["storages"] += 1
        entry["bytes"] += nbytes
    return {"by_device": by_device, "bytes": sum(storages.values()),
            "cuda_allocated": torch.cuda.memory_allocated() if torch.cuda.is_available() else None}


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

    @routes.get(TENSOR_ROUTE)
    async def read_tensor_memory(request):
        return web.json_response(tensor_memory())
