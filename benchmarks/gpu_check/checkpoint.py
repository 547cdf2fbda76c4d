"""The model the GPU check samples: a seeded-random Krea-2 of the real architecture (or the tiny test
shape for the smoke run), generated on the device and written as a native-format checkpoint."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import shutil
import time
from pathlib import Path

from .cases import Scale


def checkpoint_folder(work: Path, nbytes: int) -> Path:
    """Where the generated checkpoint goes: /dev/shm when it and host memory have room (fast to write
    and to load), else the work folder's disk."""
    shm = Path("/dev/shm")
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if shm.is_dir() and shutil.disk_usage(shm).free > 1.5 * nbytes and ram > 4 * nbytes:
        return shm
    if shutil.disk_usage(work).free > 1.1 * nbytes:
        return work
    raise SystemExit(f"No room for the {nbytes / 1e9:.1f} GB checkpoint: {work} has "
                     f"{shutil.disk_usage(work).free / 1e9:.1f} GB free; pass --work on a larger disk.")


def krea2_shape(scale: Scale):
    from devkit.krea2_synthetic import FULL_SIZE, Krea2Shape

    return FULL_SIZE if scale.full_size else Krea2Shape()


def generate_checkpoint(work: Path, scale: Scale, timings: dict) -> tuple[Path, dict]:
    """A seeded-random Krea-2 of the scale's shape, written where ``checkpoint_folder`` finds room; its
    path and what the report says of it."""
    import torch

    from devkit.krea2_synthetic import native_shapes, write_native_checkpoint

    shape = krea2_shape(scale)
    params = sum(math.prod(size) for size in native_shapes(shape).values())
    folder = checkpoint_folder(work, 2 * params)
    # Named after the work folder: runs in different folders never share a file, the smoke run's
    # fixed folder always gives the same name (torch.compile's on-disk cache keys can hold it).
    path = Path(folder) / f"krea2_gpu_check_{hashlib.sha1(str(work.resolve()).encode()).hexdigest()[:8]}.safetensors"
    device = "cuda" if torch.cuda.is_available() and not scale.cpu else "cpu"
    print(f"Generating a seeded-random Krea-2 ({params / 1e9:.2f}B parameters, bf16, on the {device}) at {path} ...",
          flush=True)
    started = time.perf_counter()
    nbytes = write_native_checkpoint(path, shape, seed=0, dtype=torch.bfloat16, device=device)
    timings["generate checkpoint"] = time.perf_counter() - started
    print(f"  {nbytes / 1e9:.1f} GB in {timings['generate checkpoint']:.0f} s", flush=True)
    model = {"shape": dataclasses.asdict(shape), "parameters": params, "dtype": "bf16", "bytes": nbytes, "seed": 0,
             "generated_on": device, "description": f"seeded-random Krea-2 {params / 1e9:.2f}B bf16"}
    return path, model
