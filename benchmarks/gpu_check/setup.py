"""Prepare, install and smoke-test the GPU check (``python3 dev.py gpu-check``).

The GPU machine runs Python 3.12 with torch and many other packages preinstalled, and has no
network. ``--prepare`` (here, with network) puts everything else the check needs into one
git-ignored folder, ``.gpu-check/``, that travels with the repository: ComfyUI's source and the
wheels of what ComfyUI and this pack need beyond the machine's packages. ``gpu-check`` (there)
installs from that folder offline and runs ``python -m benchmarks.gpu_check``. ``--smoke`` does all of
it on this machine's CPU at a small size, in a fresh environment that holds only what the GPU
machine holds (torch and the rest linked from ComfyUI's venv) plus the prepared wheels.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import fnmatch
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from devkit.comfy_harness import comfyui_python, find_comfyui  # stdlib only

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / ".gpu-check"            # what travels to the GPU machine (git-ignored)
# Downloaded and compressed wheels and inductor's CPU kernels, kept between runs and clones on a machine
# (beside the proxies' cache): a fresh clone, as CI's, would build the kernels again for minutes.
CACHE = Path(os.environ.get("KREA2_GPU_CHECK_CACHE") or Path.home() / ".cache" / "krea2-cachedit" / "gpu-check")
SIZE_LIMIT = 48 * 2**20                 # the machine takes 64 MiB per call, the repository included
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
DEVICE_BUDGET_S = 480                   # the whole check, install included
DEVICE_TIMEOUT_S = 560                  # the call's limit: the check stops itself well before it
DEVICE_COMMAND = ("set -o pipefail; PYTHONUNBUFFERED=1 python3 dev.py gpu-check 2>&1 | tee $OUT/gpu_check.log")
DEVICE_CARRY = [FOLDER.name]

# The GPU machine's preinstalled Python packages (its image's package list, 2026-11).
DEVICE_PREINSTALLED = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet flatbuffers
filelock flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub
humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite
lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multipledispatch multidict mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu
safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq
torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())

# What the check carries: ComfyUI's and this pack's needs that the machine lacks, and why.
CARRIED = {
    "diffusers": "this pack (and cache-dit) build on it",
    "cache-dit": "this pack",
    "comfy-aimdo": "ComfyUI imports it at start (main.py, execution.py)",
    "comfy-kitchen": "ComfyUI imports it at start (comfy/ldm/modules/attention.py)",
    "torchsde": "ComfyUI's samplers import it",
    "trampoline": "torchsde needs it",
    "av": "comfy_api.latest, which every node uses, imports it",
    "sqlalchemy": "ComfyUI's asset database, imported at start",
    "pydantic": "server.py's asset routes",
    "pydantic-core": "pydantic needs it",
    "annotated-types": "pydantic needs it",
    "typing-inspection": "pydantic needs it",
    "typing-extensions": "pydantic needs >= 4.16; the machine's version is not known",
    "pydantic-settings": "ComfyUI reads custom nodes' pyproject.toml (this pack's too) with it",
    "python-dotenv": "pydantic-settings needs it",
}

# ComfyUI requirements the check leaves out: the run does not need them.
LEFT_OUT = {
    "gguf": "this pack reads GGUF files with it, imported only when one is loaded; the check loads safetensors",
    "comfyui-frontend-package": "the editor; the server starts with --front-end-root (an empty folder) "
                                "and serves its API alone",
    "comfyui-workflow-templates": "editor templates (ComfyUI logs that they are missing)",
    "comfyui-embedded-docs": "editor documentation",
    "alembic": "asset-database migrations (ComfyUI warns and runs without the database)",
    "blake3": "asset hashing (a warning at start)",
    "simpleeval": "math nodes, not used",
    "kornia": "image-processing nodes, not used",
    "spandrel": "upscale-model nodes, not used",
    "pyopengl": "GLSL nodes, not used",
    "comfy-angle": "GLSL nodes, not used",
}

# Files taken out of a carried wheel. comfy-kitchen's wheel is 58 MB, nearly all of it these two
# compiled kernel libraries (CUDA, ROCm) for quantized (fp8/fp4/int8) layers and an optional
# attention (--use-ck-attention). A bf16 Krea-2 uses none of them, and comfy_kitchen reports those
# backends unavailable and keeps its eager and triton ones when the libraries are absent. The
# trimmed wheel gets the build tag "0nobinaries" so that it cannot pass for the original.
TRIMMED = {"comfy-kitchen": ("comfy_kitchen/backends/cuda/_C.*.so", "comfy_kitchen/backends/hip/_C.*.so")}
TRIM_BUILD_TAG = "0nobinaries"

# Parts of ComfyUI's tracked files the check leaves out.
COMFYUI_LEFT_OUT = {
    "tests/": "tests", "tests-unit/": "tests", ".github/": "CI", ".ci/": "CI",
    "script_examples/": "examples", "blueprints/": "editor subgraph blueprints",
    "comfy_api_nodes/": "paid API nodes (the server starts with --disable-api-nodes)",
}
# Tokenizer vocabularies (13 MB) are read only by text encoders; the check feeds seeded conditioning.
TOKENIZER_DATA = re.compile(r"tokenizer/[^/]+\.(json|txt|model)$")
SERVER_ARGS = ["--disable-api-nodes"]   # plus --front-end-root, made where the server runs


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(canonical(re.split(r"[\s<>=!~;\[]", line, maxsplit=1)[0]))
    return names


def check_requirements_decided(comfy_root: Path):
    """Every requirement of ComfyUI and this pack is preinstalled there, carried, or left out on purpose."""
    undecided = [name for path in (comfy_root / "requirements.txt", REPO / "requirements.txt")
                 for name in requirement_names(path)
                 if name not in DEVICE_PREINSTALLED and name not in CARRIED and name not in LEFT_OUT]
    if undecided:
        raise SystemExit(f"ComfyUI or this pack requires {', '.join(undecided)}, which the GPU machine lacks and "
                         f"benchmarks/gpu_check/setup.py neither carries nor leaves out: add each to CARRIED "
                         f"or LEFT_OUT there.")


def tested_versions(python: str) -> dict[str, str]:
    """The carried packages' versions in the environment the test suite runs in (ComfyUI's venv)."""
    code = ("import json, importlib.metadata as m, sys\n"
            "out = {}\n"
            "for name in sys.argv[1:]:\n"
            "    try: out[name] = m.version(name)\n"
            "    except m.PackageNotFoundError: out[name] = None\n"
            "print(json.dumps(out))")
    versions = json.loads(subprocess.run([python, "-c", code, *CARRIED], check=True, capture_output=True,
                                         text=True).stdout)
    missing = [name for name, version in versions.items() if version is None]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not installed in {python}: the GPU check carries the versions the "
                         f"tests run with; run `python3 dev.py test` once (it installs them) and prepare again.")
    return versions


# --- wheels --------------------------------------------------------------------------------

def wheel_prefix(name: str, version: str) -> str:
    return f"{canonical(name).replace('-', '_')}-{version}-"


def find_wheel(folder: Path, name: str, version: str) -> Path | None:
    prefix = wheel_prefix(name, version)
    matches = [p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix.lower())]
    return matches[0] if matches else None


def download_wheel(name: str, version: str, python_version: str, platforms: tuple[str, ...], folder: Path) -> Path:
    """The wheel for that Python and platform, from the cache folder or PyPI."""
    folder.mkdir(parents=True, exist_ok=True)
    cached = find_wheel(folder, name, version)
    if cached:
        return cached
    platform_args = [arg for platform in platforms for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps",
               "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
               *platform_args, "-d", str(folder), f"{name}=={version}"]
    result = subprocess.run(command, capture_output=True, text=True)
    found = find_wheel(folder, name, version)
    if result.returncode != 0 or found is None:
        raise SystemExit(f"Could not download {name}=={version} for Python {python_version} "
                         f"({', '.join(platforms) or 'this platform'}):\n{result.stderr.strip()[-2000:]}")
    return found


def trim_wheel(wheel: Path, patterns: tuple[str, ...], folder: Path) -> Path:
    """A copy of ``wheel`` without the files matching the glob ``patterns`` (and their RECORD lines), build-tagged."""
    name, version, *tags = wheel.name[:-len(".whl")].split("-")
    key = hashlib.sha256(f"{wheel.name} {patterns}".encode()).hexdigest()[:12]  # what it is cut from, and how
    trimmed = folder / key / f"{name}-{version}-{TRIM_BUILD_TAG}-{'-'.join(tags[-3:])}.whl"
    if trimmed.exists():
        return trimmed
    with zipfile.ZipFile(wheel) as source:
        names = source.namelist()
        missing = [pattern for pattern in patterns if not fnmatch.filter(names, pattern)]
        if missing:
            raise SystemExit(f"{wheel.name} has no file matching {', '.join(missing)}: update TRIMMED in "
                             f"benchmarks/gpu_check/setup.py.")
        remove = {n for pattern in patterns for n in fnmatch.filter(names, pattern)}
        trimmed.parent.mkdir(parents=True, exist_ok=True)
        partial = trimmed.with_suffix(".part")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                if info.filename in remove:
                    continue
                data = source.read(info.filename)
                if info.filename.endswith(".dist-info/RECORD"):
                    data = "".join(line for line in data.decode().splitlines(keepends=True)
                                   if line.split(",", 1)[0] not in remove).encode()
                target.writestr(info, data)
    partial.rename(trimmed)
    return trimmed


def compress_wheel(wheel: Path, folder: Path) -> Path:
    """``wheel`` as an xz file of the same wheel stored uncompressed: a wheel's own deflate packs each
    file alone, xz packs them together (av's FFmpeg libraries: 36 MB -> 31 MB; diffusers: 6.4 -> 3.5)."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:12]   # a changed wheel of the same name is new
    packed = folder / digest / (wheel.name + ".xz")
    if packed.exists():
        return packed
    packed.parent.mkdir(parents=True, exist_ok=True)
    stored = packed.with_suffix(".stored")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            info_copy = zipfile.ZipInfo(info.filename, info.date_time)
            info_copy.external_attr = info.external_attr
            target.writestr(info_copy, source.read(info.filename))
    partial = packed.with_suffix(".part")
    with open(stored, "rb") as source, lzma.open(partial, "wb", preset=0) as target:
        shutil.copyfileobj(source, target, 1 << 20)
    stored.unlink()
    partial.rename(packed)
    return packed


def gather_wheels(versions: dict[str, str], python_version: str, platforms: tuple[str, ...], dest: Path) -> list[dict]:
    target_key = f"py{python_version}-{'manylinux_x86_64' if platforms else 'local'}"
    downloads, trimmed, packed = CACHE / "wheels" / target_key, CACHE / "trimmed", CACHE / "xz"
    entries = []
    for name, version in versions.items():
        wheel = download_wheel(name, version, python_version, platforms, downloads)
        if name in TRIMMED:
            wheel = trim_wheel(wheel, TRIMMED[name], trimmed)
        carried = compress_wheel(wheel, packed)
        shutil.copyfile(carried, dest / carried.name)
        entries.append({"name": name, "version": version, "file": carried.name, "wheel": wheel.name,
                        "bytes": carried.stat().st_size, "why": CARRIED[name],
                        **({"removed": list(TRIMMED[name])} if name in TRIMMED else {})})
    return entries


# --- ComfyUI's source ----------------------------------------------------------------------

def comfyui_files(comfy_root: Path) -> list[str]:
    listed = subprocess.run(["git", "-C", str(comfy_root), "ls-files", "-z"], check=True,
                            capture_output=True).stdout.decode().split("\0")
    return [path for path in listed
            if path and not path.startswith(tuple(COMFYUI_LEFT_OUT)) and not TOKENIZER_DATA.search(path)
            and (comfy_root / path).is_file()]


def comfyui_revision(comfy_root: Path) -> dict:
    def git(*args):
        return subprocess.run(["git", "-C", str(comfy_root), *args], capture_output=True, text=True).stdout.strip()

    version_file = comfy_root / "comfyui_version.py"
    match = re.search(r'__version__\s*=\s*"([^"]+)"', version_file.read_text()) if version_file.exists() else None
    return {"version": match.group(1) if match else None, "commit": git("rev-parse", "HEAD"),
            "locally_changed_files": len(git("status", "--porcelain", "--untracked-files=no").splitlines())}


def pack_comfyui(comfy_root: Path, archive: Path) -> int:
    files = comfyui_files(comfy_root)
    with tarfile.open(archive, "w:xz", preset=3) as tar:
        for path in files:
            tar.add(comfy_root / path, arcname=f"ComfyUI/{path}", recursive=False)
    return len(files)


# --- prepare -------------------------------------------------------------------------------

def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def clear_folder(folder: Path):
    if folder.exists():
        if any(folder.iterdir()) and not (folder / "manifest.json").exists():
            raise SystemExit(f"{folder} exists and is not a prepared GPU-check folder; remove it or choose another.")
        shutil.rmtree(folder)
    (folder / "wheels").mkdir(parents=True)


def prepare(dest: Path, python_version: str, platforms: tuple[str, ...], comfy_root: Path,
            tested_python: str) -> dict:
    started = time.time()
    check_requirements_decided(comfy_root)
    clear_folder(dest)
    wheels = gather_wheels(tested_versions(tested_python), python_version, platforms, dest / "wheels")
    comfy_files = pack_comfyui(comfy_root, dest / "comfyui.tar.xz")
    manifest = {
        "python": python_version, "platforms": list(platforms) or ["this machine's"],
        "comfyui": {**comfyui_revision(comfy_root), "files": comfy_files, "archive": "comfyui.tar.xz",
                    "left_out": {**COMFYUI_LEFT_OUT, "*tokenizer/ vocabularies": "read only by text encoders"}},
        "wheels": wheels, "left_out": LEFT_OUT, "server_args": SERVER_ARGS,
        "preinstalled_there": "torch, torchvision, torchaudio and the rest of DEVICE_PREINSTALLED",
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    size = folder_size(dest)
    manifest["bytes"] = size
    print_summary(dest, manifest, time.time() - started)
    if size > SIZE_LIMIT:
        raise SystemExit(f"{dest} is {size / 2**20:.1f} MiB, over the {SIZE_LIMIT / 2**20:.0f} MiB this check allows "
                         f"itself (the GPU machine takes 64 MiB per call, the repository included).")
    return manifest


def print_summary(dest: Path, manifest: dict, seconds: float):
    print(f"\nPrepared {dest} in {seconds:.0f} s for Python {manifest['python']} "
          f"({', '.join(manifest['platforms'])}): {manifest['bytes'] / 2**20:.1f} MiB "
          f"(limit {SIZE_LIMIT / 2**20:.0f} MiB)")
    comfy = manifest["comfyui"]
    archive = dest / comfy["archive"]
    print(f"  {archive.name:<64}{archive.stat().st_size / 2**20:6.1f} MiB  ComfyUI {comfy['version']} "
          f"({comfy['commit'][:10]}), {comfy['files']} tracked files")
    for wheel in manifest["wheels"]:
        print(f"  wheels/{wheel['file'][:57]:<57}{wheel['bytes'] / 2**20:6.1f} MiB  {wheel['why']}")
    print("Left out of ComfyUI's source: " + "; ".join(f"{k} ({v})" for k, v in comfy["left_out"].items()))
    print("Left out of ComfyUI's requirements: " + "; ".join(f"{k} ({v})" for k, v in manifest["left_out"].items()))
    print("Also not carried: torch, torchvision, torchaudio and the other packages the GPU machine has.")
    for name, files in TRIMMED.items():
        print(f"Trimmed: {name} without {', '.join(files)} (build tag {TRIM_BUILD_TAG}; see TRIMMED).")


def print_device_call():
    call = {"command": DEVICE_COMMAND, "carry": DEVICE_CARRY, "timeout_s": DEVICE_TIMEOUT_S}
    print("\nOn the GPU machine, from the repository root (the device tool's `run`):")
    print(json.dumps(call, indent=1))
    print(f"({len(DEVICE_COMMAND)} characters; the check finishes in {DEVICE_BUDGET_S} s, install included, "
          f"and writes gpu_check.json, gpu_check.log and comfyui.log to $OUT)")


# --- install (on the GPU machine, and in the smoke run) ------------------------------------

def install(folder: Path, work: Path) -> tuple[Path, Path]:
    """ComfyUI and the wheels from a prepared folder, offline. Returns (site-packages, ComfyUI)."""
    manifest_path = folder / "manifest.json"
    if not manifest_path.exists():
        raise SystemExit(f"No prepared GPU-check folder at {folder}: run `python3 dev.py gpu-check --prepare` "
                         f"on a machine with network first, and carry {folder.name}.")
    manifest = json.loads(manifest_path.read_text())
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != running:
        raise SystemExit(f"{folder} was prepared for Python {manifest['python']}, this is Python {running}: "
                         f"prepare it with `python3 dev.py gpu-check --prepare --python {running}`.")
    with tarfile.open(folder / manifest["comfyui"]["archive"]) as tar:
        tar.extractall(work, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(work)
    wheels = work / "wheels"
    wheels.mkdir()
    for entry in manifest["wheels"]:
        with lzma.open(folder / "wheels" / entry["file"]) as source, open(wheels / entry["wheel"], "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-index",
                    "--no-deps", "--no-compile", "--no-cache-dir", "--target", str(site),
                    *sorted(str(p) for p in wheels.glob("*.whl"))], check=True)
    return site, work / "ComfyUI"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def run_check(folder: Path, work: Path | None, smoke: bool, extra: list[str]) -> int:
    started = time.time()
    if not smoke and not cuda_available():
        print("gpu-check: no CUDA device here. It measures Krea-2 at full size on a GPU; "
              "`python3 dev.py gpu-check --smoke` runs the same code on the CPU at a small size.", file=sys.stderr)
        return 2
    own_work = work is None
    work = Path(tempfile.mkdtemp(prefix="krea2-gpu-check-")) if own_work else work
    try:
        work.mkdir(parents=True, exist_ok=True)
        print(f"Installing from {folder} into {work} (offline) ...", flush=True)
        site, comfy = install(folder, work)
        print(f"Installed in {time.time() - started:.0f} s", flush=True)
        python_path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=python_path, COMFYUI_PATH=str(comfy), PYTHONUNBUFFERED="1")
        command = [sys.executable, "-m", "benchmarks.gpu_check", "--work", str(work.resolve()),
                   "--started", str(started), "--manifest", str((folder / "manifest.json").resolve()),
                   *(["--smoke"] if smoke else []), *extra]
        return subprocess.run(command, env=env, cwd=REPO).returncode
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


# --- smoke: the same path on this machine's CPU --------------------------------------------

def link_device_packages(dest: Path, exclude: list[str]):
    """Link, from the running environment, the packages the GPU machine has preinstalled.

    Each one that is installed here comes with what it needs here (so that the copies here
    import), except the packages the check carries or leaves out: those must come from the
    prepared wheels, as there. Runs inside ComfyUI's venv, which has ``packaging``.
    """
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    installed = {canonical(d.metadata["Name"]): d for d in metadata.distributions()}
    skipped = {canonical(name) for name in exclude}
    todo = [name for name in DEVICE_PREINSTALLED if name in installed]
    linked = set()
    while todo:
        name = todo.pop()
        if name in linked or name in skipped:
            continue
        linked.add(name)
        for line in installed[name].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                if canonical(requirement.name) in installed:
                    todo.append(canonical(requirement.name))
    dest.mkdir(parents=True, exist_ok=True)
    for name in sorted(linked):
        dist = installed[name]
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source, link = Path(dist.locate_file(top)), dest / top
            if source.exists() and not top.endswith(".pth") and not link.exists():
                link.symlink_to(source)
    print(json.dumps(sorted(linked)))


def make_device_like_env(folder: Path, comfy_python: str) -> Path:
    """A fresh venv that sees only the GPU machine's packages, linked from ComfyUI's venv."""
    base = subprocess.run([comfy_python, "-c", "import sys; print(sys._base_executable)"], check=True,
                          capture_output=True, text=True).stdout.strip()
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    packages = folder / "device-packages"
    code = (f"from pathlib import Path; from benchmarks.gpu_check.setup import link_device_packages; "
            f"link_device_packages(Path({str(packages)!r}), {list(CARRIED) + list(LEFT_OUT)!r})")
    linked = json.loads(subprocess.run([comfy_python, "-c", code], check=True, capture_output=True, cwd=REPO,
                                       text=True).stdout.strip().splitlines()[-1])
    beyond = sorted(set(linked) - DEVICE_PREINSTALLED)
    print(f"Fresh environment: {len(linked)} packages linked from ComfyUI's venv as the GPU machine has them"
          f"{f' (with what they need here: {beyond})' if beyond else ''}", flush=True)
    python = folder / "venv" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    Path(site, "device_packages.pth").write_text(str(packages) + "\n")
    return python


@contextlib.contextmanager
def exclusive(lock_path: Path):
    """One smoke run at a time on this machine: they share their folder and caches."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"Another smoke run holds {lock_path}; waiting for it ...", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def python_version(python: str) -> str:
    code = "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"
    return subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def smoke(keep: bool, extra: list[str]) -> int:
    started = time.time()
    comfy_root = find_comfyui()
    if comfy_root is None:
        print("gpu-check --smoke needs a ComfyUI (COMFYUI_PATH or ~/comfy/ComfyUI) with its venv: that venv "
              "stands in for the GPU machine's preinstalled torch.", file=sys.stderr)
        return 2
    comfy_python = comfyui_python(comfy_root)
    # A fixed folder: torch.compile's on-disk cache (below) only hits when ComfyUI's path is the same.
    folder = CACHE / "smoke"
    with exclusive(CACHE / "smoke.lock"):
        shutil.rmtree(folder, ignore_errors=True)
        try:
            prepared = folder / "prepared"
            prepare(prepared, python_version(comfy_python), (), comfy_root, comfy_python)
            python = make_device_like_env(folder / "env", comfy_python)
            print(f"Smoke setup done in {time.time() - started:.0f} s; running the check in the fresh environment",
                  flush=True)
            command = [python, REPO / "dev.py", "gpu-check", "--from", prepared, "--smoke", "--work",
                       folder / "run", *extra]
            # torch.compile's CPU kernels take minutes to build on two cores: keep them for the next smoke run.
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(CACHE / "inductor"))
            return subprocess.run([str(c) for c in command], env=env).returncode
        finally:
            if keep:
                print(f"Kept {folder}")
            else:
                shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dev.py gpu-check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="put what the GPU machine lacks into the folder")
    parser.add_argument("--python", default=DEVICE_PYTHON, help="Python version to prepare wheels for")
    parser.add_argument("--smoke", action="store_true",
                        help="the same path on the CPU at a small size (without --from: prepare for this "
                             "Python into .gpu-check-cache/smoke and run in a fresh environment)")
    parser.add_argument("--from", dest="folder", type=Path, help=f"prepared folder to install from ({FOLDER.name})")
    parser.add_argument("--work", type=Path, help="where to install and generate (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="--smoke: keep .gpu-check-cache/smoke")
    args, extra = parser.parse_known_args(argv)
    if args.prepare:
        comfy_root = find_comfyui()
        if comfy_root is None:
            raise SystemExit("--prepare needs ComfyUI (COMFYUI_PATH or ~/comfy/ComfyUI): its source travels along.")
        prepare(args.folder or FOLDER, args.python, DEVICE_PLATFORMS, comfy_root, comfyui_python(comfy_root))
        print_device_call()
        return 0
    if args.smoke and args.folder is None:
        return smoke(args.keep, extra)
    return run_check(args.folder or FOLDER, args.work, args.smoke, extra)
