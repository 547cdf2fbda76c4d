"""Whether a model that ran is freed: weak references taken in the server process, read over HTTP.

``Krea2TestModelWatch`` (MODEL in, the same MODEL out) loads the model as the sampler will and then
records, under a label, a weak reference to the model and to every module of its diffusion model,
and each module's own attributes (the names in its ``__dict__`` and how many hooks each hook table
holds). It keeps nothing strongly.

``GET /krea2_test/model_watch?label=L`` answers, for that label: which of those objects are still
alive, how the attributes of the alive modules differ from what they were before the run (a cache
left on a module, a forward left bound on an instance, a hook left installed), and which objects a
module-level registry of the pack or of cache-dit reaches that are a ``torch.nn.Module`` or a
``torch.Tensor`` (a walk from every module-level value of those packages through
``gc.get_referents``). ``collect=1`` runs ``gc.collect()`` first. Without a label it answers only
the flags ``POST /free`` set that the prompt worker has not taken yet: after ``POST /free`` with
``{"unload_models": true, "free_memory": true}`` and once none is pending, a model nothing else
holds is gone.
"""

from __future__ import annotations

import collections
import gc
import logging
import sys
import types
import weakref
from pathlib import Path

import torch
from aiohttp import web

WATCH_ROUTE = "/krea2_test/model_watch"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEVKIT_DIR = REPO_ROOT / "devkit"
THIRD_PARTY_PACKAGES = ("cache_dit",)   # libraries the pack drives, whose module-level state is checked too
MAX_OBJECTS = 300_000   # the registry walk stops (and says so) past this many objects
MAX_REPORTED = 20
# What torch.compile puts into the globals of a module whose frames it compiled (its graphs and the
# functions that resume after a graph break): the compiler's cache, not a registry of the pack;
# whether it keeps a model alive is what the weak references tell.
COMPILER_GLOBALS = ("__compiled_fn_", "__resume_at_")


class _Watch:
    def __init__(self, model):
        base = model.model
        diffusion_model = base.diffusion_model
        self.refs: dict[str, weakref.ref] = {"model": weakref.ref(base)}
        self.attributes: dict[str, dict[str, int | None]] = {}
        for name, module in diffusion_model.named_modules():
            name = f"diffusion_model.{name}" if name else "diffusion_model"
            self.refs[name] = weakref.ref(module)
            self.attributes[name] = own_attributes(module)

    def report(self) -> dict:
        alive = [name for name, ref in self.refs.items() if ref() is not None]
        changed = {}
        for name in alive:
            if name in self.attributes:
                difference = attribute_changes(self.attributes[name], own_attributes(self.refs[name]()))
                if difference:
                    changed[name] = difference
        return {"watched": len(self.refs), "alive": alive[:MAX_REPORTED], "alive_count": len(alive),
                "changed": dict(list(changed.items())[:MAX_REPORTED]), "changed_count": len(changed)}


_WATCHES: dict[str, _Watch] = {}


def own_attributes(module: torch.nn.Module) -> dict[str, int | None]:
    """The names in a module's ``__dict__``; for its hook tables, how many hooks each holds."""
    return {key: (len(value) if "hook" in key and isinstance(value, dict) else None)
            for key, value in vars(module).items()}


def attribute_changes(before: dict, after: dict) -> dict:
    difference = {}
    if added := sorted(set(after) - set(before)):
        difference["added"] = added
    if removed := sorted(set(before) - set(after)):
        difference["removed"] = removed
    hooks = {key: [before[key], after[key]] for key in set(before) & set(after) if before[key] != after[key]}
    if hooks:
        difference["hooks"] = hooks
    return difference


def _global_hooks() -> dict[str, int]:
    from torch.nn.modules import module

    return {name: len(getattr(module, name)) for name in dir(module)
            if name.startswith("_global_") and "hook" in name and isinstance(getattr(module, name), dict)}


def _scanned_modules() -> dict[str, types.ModuleType]:
    """The pack's modules (files of this repository outside devkit/) and the third-party packages'."""
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        if name.split(".")[0] in THIRD_PARTY_PACKAGES:
            found[name] = module
            continue
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path.is_relative_to(REPO_ROOT) and not path.is_relative_to(DEVKIT_DIR):
            found[name] = module
    return found


def registry_holdings() -> dict:
    """Every ``torch.nn.Module`` and ``torch.Tensor`` that a module-level value of a scanned module
    reaches (weak references do not count), with the way there.

    The walk follows ``gc.get_referents`` from each module-level value. It does not enter other
    modules or their globals, nor classes defined elsewhere (another library's class attributes are
    not the pack's); it enters functions (closures) and instances of any class.
    """
    scanned = _scanned_modules()
    module_dicts = {id(vars(module)) for module in list(sys.modules.values()) if module is not None}
    scanned_names = set(scanned)
    stop_types = (types.ModuleType, logging.Logger, logging.Manager, logging.Handler, str, bytes, int, float,
                  complex, bool, type(None), torch.dtype, torch.device)
    seen: set[int] = set()
    queue = collections.deque()
    for module_name, module in scanned.items():
        for name, value in list(vars(module).items()):
            if not (name.startswith("__") and name.endswith("__")) and not name.startswith(COMPILER_GLOBALS):
                queue.append((value, f"{module_name}.{name}"))
    holdings, visited = [], 0
    while queue and visited < MAX_OBJECTS:
        obj, path = queue.popleft()
        if id(obj) in seen or id(obj) in module_dicts or isinstance(obj, stop_types):
            continue
        seen.add(id(obj))
        visited += 1
        if isinstance(obj, (torch.nn.Module, torch.Tensor)):
            holdings.append({"path": path, "type": f"{type(obj).__module__}.{type(obj).__qualname__}"})
            continue
        if isinstance(obj, type) and obj.__module__ not in scanned_names:
            continue
        for referent in gc.get_referents(obj):
            queue.append((referent, f"{path} > {type(referent).__name__}"))
    return {"holdings": holdings[:MAX_REPORTED], "holding_count": len(holdings), "visited": visited,
            "complete": not queue, "modules": len(scanned)}


def pending_flags() -> list[str]:
    """The flags (``unload_models``, ``free_memory``) POST /free set that the prompt worker has not
    taken yet: once it has, it unloads and resets its caches before it takes the next prompt."""
    from server import PromptServer

    return sorted(PromptServer.instance.prompt_queue.get_flags(reset=False))


def report(label: str, collect: bool) -> dict:
    if collect:
        gc.collect()
    answer = {"pending_flags": pending_flags(), "global_hooks": _global_hooks()}
    if not label:
        return answer
    watch = _WATCHES.get(label)
    if watch is None:
        raise web.HTTPNotFound(text=f"no model watched under the label {label!r}: queue a prompt with "
                                    f"Krea2TestModelWatch (label {label!r}) first")
    return {"label": label, **answer, **watch.report(), **registry_holdings()}


class Krea2TestModelWatch:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "watch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "label": ("STRING", {"default": ""})}}

    def watch(self, model, label):
        import comfy.model_management

        # Loaded first, as the sampler will load it: what ComfyUI itself puts on the modules when it
        # loads them is then in the recorded attributes, and only what the run leaves is a change.
        comfy.model_management.load_models_gpu([model])
        _WATCHES[label] = _Watch(model)
        return (model,)


def register(routes):
    @routes.get(WATCH_ROUTE)
    async def read_model_watch(request):
        return web.json_response(report(request.query.get("label", ""), request.query.get("collect") == "1"))
