"""Which files and folders the Krea-2 loader node lists: Krea-2 checkpoints, told apart cheaply.

Only headers are read (safetensors' and GGUF's), never weights, and each answer is cached
until the file changes, since ComfyUI rebuilds the list on every refresh of its UI.
Quantized Krea-2 files are listed too, so that picking one gets the loader's explanation.
Nothing here imports ComfyUI.
"""

from __future__ import annotations

from pathlib import Path

from .krea2_checkpoint import Krea2LoadError, detect_key_format
from .krea2_diffusers import CONFIG_NAME, read_header, transformer_folder
from .krea2_gguf import GGUF_SUFFIX, is_gguf, open_reader, tensor_infos

FOLDER_SEARCH_DEPTH = 3  # e.g. diffusers/<org>/<model>/transformer

_CANDIDATE_CACHE: dict[tuple[str, int, int], bool] = {}


def is_krea2_candidate(path: Path) -> bool:
    """Cheap check for listing: a Krea-2 file (quantized ones too) or a Krea-2 diffusers folder."""
    path = Path(path)
    try:
        if path.is_dir():
            transformer_folder(path)
            return True
        if is_gguf(path):
            return detect_key_format(tensor_infos(open_reader(path))) is not None
        return detect_key_format(read_header(path)) is not None
    except Krea2LoadError:
        return False


def _cached_is_candidate(path: Path) -> bool:
    # Headers are re-read only when a file or config changes: the list is rebuilt on every UI refresh.
    probe = path / CONFIG_NAME if path.is_dir() else path
    probe = probe if probe.exists() else path / "transformer" / CONFIG_NAME
    try:
        stat = probe.stat()
    except OSError:
        return False
    cache_key = (str(path), stat.st_mtime_ns, stat.st_size)
    if cache_key not in _CANDIDATE_CACHE:
        _CANDIDATE_CACHE[cache_key] = is_krea2_candidate(path)
    return _CANDIDATE_CACHE[cache_key]


def krea2_files(named_files) -> list[str]:
    """Names of the Krea-2 safetensors and GGUF files among ``(name, full path)`` pairs."""
    return [name for name, full_path in named_files
            if str(name).lower().endswith((".safetensors", GGUF_SUFFIX)) and _cached_is_candidate(Path(full_path))]


def krea2_folders(roots) -> list[str]:
    """Krea-2 diffusers folders under ``roots``, as paths relative to their root."""
    found = []
    for root in map(Path, roots):
        if root.is_dir():
            found.extend(_walk_folders(root, root, FOLDER_SEARCH_DEPTH))
    return sorted(set(found))


def _walk_folders(root: Path, folder: Path, depth: int) -> list[str]:
    found = []
    try:
        children = sorted(child for child in folder.iterdir() if child.is_dir())
    except OSError:
        return found
    for child in children:
        if _cached_is_candidate(child):
            found.append(child.relative_to(root).as_posix())
        elif depth > 1:
            found.extend(_walk_folders(root, child, depth - 1))
    return found
