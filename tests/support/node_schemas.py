"""The pack's node definitions as the editor receives them, and the translation keys the editor looks up for them.

``pack_node_infos`` reads the real node classes (``NODES`` in nodes/__init__.py) in ComfyUI's own Python, in a
process of their own (the pack's nodes import ComfyUI, which this test process never imports): each node's
``GET_NODE_INFO_V1()``, the entry ``/object_info`` serves for it, in ``NODES`` order.

``translatable_inputs`` names every input of such an entry under the key the graph editor looks it up by in
``nodeDefs.<node>.inputs``: the input's name with dots turned into underscores, where an input that a dynamic
combo shows (``preset``'s ``custom`` settings) is named ``<combo>.<input>`` (so ``preset_forecast``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
from pathlib import Path

DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"

_SCRIPT = r"""
import json, sys
sys.argv = [sys.argv[0], "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
from devkit.comfy_harness import load_pack
load_pack()
from krea2_cachedit.nodes import NODES
print(json.dumps([cls.GET_NODE_INFO_V1() for cls in NODES]))
"""


@functools.cache
def pack_node_infos(comfy_root: Path) -> list[dict]:
    from devkit.comfy_harness import comfyui_python, repo_env

    result = subprocess.run([comfyui_python(comfy_root), "-c", _SCRIPT], cwd=comfy_root, env=repo_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"could not read the node classes:\n{result.stderr[-4000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@dataclasses.dataclass(frozen=True)
class NodeInput:
    key: str              # the editor's translation key (``preset_forecast``)
    name: str             # the input's own name, as the docs write it (``forecast``)
    tooltip: str | None
    label: str | None = None   # the schema's display_name, which the editor shows in English (None: the name)
    advanced: bool = False     # behind the editor's "advanced" toggle


def i18n_key(name: str) -> str:
    """The editor's key for a name: dots become underscores (its ``normalizeI18nKey``)."""
    return name.replace(".", "_")


def translatable_inputs(info: dict) -> list[NodeInput]:
    """Every input of a node entry, those a dynamic combo shows included, in the entry's order."""
    found = []

    def walk(inputs: dict, prefix: str = ""):
        for section in ("required", "optional"):
            for name, (kind, options, *_) in (inputs.get(section) or {}).items():
                found.append(NodeInput(i18n_key(prefix + name), name, options.get("tooltip"),
                                       options.get("display_name"), bool(options.get("advanced"))))
                if kind == DYNAMIC_COMBO:
                    for option in options["options"]:
                        walk(option["inputs"], f"{prefix}{name}.")

    walk(info["input"])
    unique = {item.key: item for item in found}   # an input two options share is one key
    return list(unique.values())


def outputs(info: dict) -> list[tuple[str, str | None]]:
    """(name, tooltip) of each output, in order (the editor's keys are their indexes)."""
    tooltips = info.get("output_tooltips") or [None] * len(info["output_name"])
    return list(zip(info["output_name"], tooltips))
