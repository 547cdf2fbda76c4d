"""The ComfyUI server the GPU check samples through: a base dir with the generated checkpoint linked in,
no editor, classic model loading; its log kept next to the results."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from devkit.comfy_harness import ComfyServer
from .cases import Scale


def start_server(comfy_root: Path, work: Path, scale: Scale, checkpoint: Path, manifest: dict | None) -> ComfyServer:
    base = ComfyServer.prepare_base_dir(work / "comfy_base")
    (base / "models" / "diffusion_models" / checkpoint.name).symlink_to(checkpoint)
    no_editor = work / "no_editor"   # the API needs no editor: an empty folder instead of comfyui-frontend-package
    no_editor.mkdir(exist_ok=True)
    # TorchCompileModel's clone leaves dynamic VRAM (it loads a second, classic copy of the model when
    # dynamic VRAM is on): classic loading for every case keeps one model in VRAM, like for like.
    extra = ["--front-end-root", str(no_editor), "--disable-dynamic-vram", *((manifest or {}).get("server_args", []))]
    return ComfyServer(comfy_root, base, extra_args=extra, cpu=scale.cpu).start(timeout=300)


def keep_server_log(server: ComfyServer):
    """ComfyUI's log next to the JSON when the results go to $OUT (the GPU machine sends that folder back)."""
    if os.environ.get("OUT") and server.log_path.exists():
        shutil.copyfile(server.log_path, Path(os.environ["OUT"]) / "comfyui.log")
