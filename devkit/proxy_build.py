"""Building a trained proxy into its cache folder: what the two proxy builders (``krea2_proxy.py``,
``krea2_turbo_proxy.py``) share.

A build is named by its **build id**, the hash of its *recipe*: the builder's code that decides the
weights (its data, model and training functions, its settings dataclass) with docstrings, comments,
imports and the builder's plumbing (its ``NOT_RECIPE`` names: the CLI, the cache lookups) left out,
plus its settings' values and, for a distilled proxy, its teacher's build id. Editing a docstring or
the CLI keeps the build; changing a setting, the data or the training loop makes a new one.

Where a build comes from, in order:
1. the cache (``KREA2_PROXY_CACHE`` or ``~/.cache/krea2-cachedit``), ``<kind>-<build id>/``;
2. a pinned build (``KREA2_PINNED_PROXIES`` or ``../shared/proxies`` beside the clone): a folder of
   the same name whose checkpoint's sha256 is the ``weights_sha256`` of its ``build.json`` is copied
   into the cache, so every machine samples the same weights (training on another machine gives
   other weights); a folder that does not check out is ignored with one line saying why;
3. otherwise the builder trains it, into a private folder renamed into the cache when complete.

``PINS`` (``proxy_pins.json``) names the build each pinned recipe was published as: builds pinned
before the build id covered the recipe alone carry the hash of their builder's whole file in their
name, and keep it while the recipe is unchanged.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
CACHE_ENV = "KREA2_PROXY_CACHE"
PINNED_ENV = "KREA2_PINNED_PROXIES"
BUILD_INFO_NAME = "build.json"
PINS = json.loads((HERE.parent / "proxy_pins.json").read_text())


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "krea2-cachedit")


def pinned_root() -> Path:
    return Path(os.environ.get(PINNED_ENV) or REPO.parent / "shared" / "proxies")


def _without_docstring(body: list) -> list:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:] or [ast.Pass()]
    return body


def _defined_names(node) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def recipe_source(builder: Path, not_recipe: tuple[str, ...]) -> str:
    """The builder's recipe as one normalised text: its top-level functions, classes and assignments
    but those named in ``not_recipe``, without docstrings (comments and formatting do not survive
    parsing); imports and other statements (path set-up, the ``__main__`` guard) are plumbing."""
    return _recipe_source(str(builder), builder.stat().st_mtime_ns, tuple(not_recipe))


@functools.lru_cache(maxsize=8)   # build ids are asked for often (each test's proxy lookup): parse each file once
def _recipe_source(builder: str, mtime_ns: int, not_recipe: tuple[str, ...]) -> str:
    kept = []
    for node in ast.parse(Path(builder).read_text()).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
            continue
        if _defined_names(node) & set(not_recipe):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner.body = _without_docstring(inner.body)
        kept.append(ast.dump(node, annotate_fields=False))
    return "\n".join(kept)


def recipe_hash(builder: Path, not_recipe: tuple[str, ...], settings: dict, *more: str) -> str:
    digest = hashlib.sha256(recipe_source(builder, not_recipe).encode())
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for part in more:
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def build_id(kind: str, recipe: str) -> str:
    """The recipe's build id: the id its build was pinned as, else the recipe hash itself."""
    pin = PINS.get(kind, {})
    return pin["build_id"] if pin.get("recipe") == recipe else recipe


def weights_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_built(folder: Path) -> bool:
    return (folder / BUILD_INFO_NAME).is_file()


def pinned_problem(pinned: Path, checkpoint_name: str) -> str | None:
    """Why the pinned folder is not this build (None when it is)."""
    info_path = pinned / BUILD_INFO_NAME
    if not info_path.is_file():
        return f"{info_path} is missing"
    expected = json.loads(info_path.read_text()).get("weights_sha256")
    if not (pinned / checkpoint_name).is_file():
        return f"{pinned / checkpoint_name} is missing"
    actual = weights_sha256(pinned / checkpoint_name)
    if actual != expected:
        return f"{checkpoint_name}'s sha256 is {actual[:16]}..., its build.json says {str(expected)[:16]}..."
    return None


def take_pinned(folder: Path, checkpoint_name: str, say: Callable[[str], None] = print) -> bool:
    """Copy the pinned build of ``folder``'s name into ``folder`` when there is one and its weights
    are the ones its record names; False (with one line why, when a folder was there) otherwise."""
    pinned = pinned_root() / folder.name
    if not pinned.is_dir():
        return False
    problem = pinned_problem(pinned, checkpoint_name)
    if problem:
        say(f"Pinned build {pinned} ignored: {problem}; building instead.")
        return False
    work = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    for item in pinned.iterdir():
        if item.is_file():
            shutil.copyfile(item, work / item.name)   # the contents, not the pinned folder's read-only mode
    _finish(work, folder)
    say(f"Pinned build taken: {pinned} -> {folder}")
    return True


def ensure_built(folder: Path, checkpoint_name: str, module: str, what: str, comfy_root: Path | None = None,
                 quiet: bool = False) -> dict:
    """The build record of ``folder``: from the cache, else from its pinned build, else built first by
    ``python -m <module> build`` in ComfyUI's interpreter (with a progress bar), after saying ``what`` it does
    (e.g. "Training a small Krea-2 proxy once (about 13 minutes on 2 CPU cores)")."""
    if not is_built(folder) and not take_pinned(folder, checkpoint_name):
        import subprocess

        from devkit.comfy_harness import comfyui_python, find_comfyui

        comfy_root = comfy_root or find_comfyui()
        if comfy_root is None:
            raise RuntimeError(f"{module} needs ComfyUI's model code to build: no ComfyUI found "
                               "(set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI)")
        if not quiet:
            print(f"{what}; it is cached in {folder}", flush=True)
        subprocess.run([comfyui_python(comfy_root), "-m", module, "build", "--comfyui", str(comfy_root)],
                       check=True, cwd=REPO)
    return json.loads((folder / BUILD_INFO_NAME).read_text())


def build_main(argv: list[str], name: str, settings, cache_dir: Callable[[], Path], ensure: Callable[..., object],
               train: Callable[..., dict], summary: Callable[[dict], str]) -> int:
    """A trained proxy's command line: ``build`` trains it into its cache folder (or ``--out``, where
    ``--iterations`` may cut it short for measuring), ``ensure`` only when the cache has none, ``path``
    prints the cache folder. ``train(comfy_root, out, settings)`` writes a build; ``summary(info)`` is the
    line after it."""
    import argparse
    import dataclasses

    parser = argparse.ArgumentParser(description=f"Build the {name} into its cache folder.")
    parser.add_argument("command", choices=["build", "ensure", "path"],
                        help="build: train into the cache (or --out); ensure: build only when the cache has none; "
                             "path: print the cache folder")
    parser.add_argument("--comfyui", type=Path, help="the ComfyUI checkout whose model code trains it")
    parser.add_argument("--out", type=Path, help="build here instead of the cache folder")
    parser.add_argument("--iterations", type=int, help="override (a build for measuring only)")
    args = parser.parse_args(argv)
    if args.command == "path":
        print(cache_dir())
        return 0
    if args.command == "ensure":
        built = ensure(args.comfyui)
        print(f"{name}: {built.checkpoint} (built in {built.info['wall_s']} s wall, {built.info['cpu_s']} s CPU)",
              flush=True)
        return 0
    from devkit.comfy_harness import find_comfyui

    comfy_root = args.comfyui or find_comfyui()
    chosen = settings if args.iterations is None else dataclasses.replace(settings, iterations=args.iterations)
    if args.out is None and chosen != settings:
        raise SystemExit("--iterations needs --out: the cache holds only builds of the generator's own settings")
    out = args.out or cache_dir()
    info = train(comfy_root, out, chosen) if args.out else build_into(out, lambda work: train(comfy_root, work, chosen))
    print(f"{name} built in {out}: {info['wall_s']} s wall, {info['cpu_s']} s CPU, {summary(info)}", flush=True)
    return 0


def build_into(folder: Path, build: Callable[[Path], dict]) -> dict:
    """Run ``build(work)`` into a private folder renamed to ``folder`` when complete: an interrupted
    build leaves no half-written proxy behind, and of two builds at once the first to finish is kept
    (the same weights: the builds are deterministic on one machine)."""
    work = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    info = build(work)
    _finish(work, folder)
    return info


def _finish(work: Path, folder: Path):
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        work.rename(folder)
    except OSError:   # another build or copy finished first: keep that one
        shutil.rmtree(work, ignore_errors=True)
