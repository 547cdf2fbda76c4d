"""Generated test checkpoints kept between runs.

A seeded-random checkpoint is the same file whenever its generator, its arguments and the ComfyUI
whose classes lay out its keys are the same, so a run copies it from the cache instead of drawing it
again: Z-Image's (2.1 GB) takes about 25 s to draw on two cores, the two-block real-size Krea-2's (3 GB)
about 40 s, and a fresh clone's test run would otherwise draw each of them in every fixture that needs
one. The cache is ``KREA2_CHECKPOINT_CACHE``, else ``checkpoints/`` in the proxies' cache folder; a
file is named ``<label>-<key>`` (the key hashes everything that decides its bytes), and writing a label
under a new key removes the label's older files, so the folder holds one file per checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from devkit.proxy_build import cache_root

CACHE_ENV = "KREA2_CHECKPOINT_CACHE"


def checkpoint_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or cache_root() / "checkpoints")


def comfyui_identity(comfy_root: Path) -> str:
    """The ComfyUI a generator builds its model classes from: its version and, in a git clone, its commit."""
    version = comfy_root / "comfyui_version.py"
    text = version.read_text() if version.exists() else ""
    head = subprocess.run(["git", "-C", str(comfy_root), "rev-parse", "HEAD"], capture_output=True, text=True)
    return text + (head.stdout.strip() if head.returncode == 0 else "")


def cache_key(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def cached_checkpoint(path: Path, label: str, key: str, make: Callable[[Path], object]) -> Path:
    """``path`` holds the checkpoint ``make(file)`` writes, drawn once per ``label`` and ``key``, then copied.

    A copy, not a link: a test may write over its file, which must never reach the cache."""
    cached = checkpoint_cache() / f"{label}-{key}{path.suffix}"
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")   # never a half file under the name
        try:
            make(partial)
            os.replace(partial, cached)
        finally:
            partial.unlink(missing_ok=True)
        for older in cached.parent.glob(f"{label}-*{path.suffix}"):
            if older != cached:
                older.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, path)
    return path
