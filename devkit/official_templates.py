"""ComfyUI's own templates, read as sampling recipes: what a user who opens one runs, as shipped.

The templates are the JSON files of the ``comfyui-workflow-templates`` packages that ComfyUI's ``requirements.txt``
installs (``comfyui_workflow_templates.get_asset_path``). A template is the editor's format: nodes with positional
widget values, links, and subgraphs (a node whose type is a subgraph's id), some of whose values are switched
(``ComfySwitchNode`` fed by a ``PrimitiveBoolean``, e.g. "Enable Lightning LoRA") or set by primitives. Each sampler
of a template (``KSampler``, ``KSamplerAdvanced``, ``SamplerCustom``, ``SamplerCustomAdvanced``, not bypassed) is
read by following its links as the executor would: steps, CFG, sampler, scheduler, and the model chain up to the
loader (the file, the shift of a ``ModelSampling*`` node, the LoRAs), each switch taking the branch its value picks.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

# Each node type's widgets in the order the editor stores their values (``widgets_values``); a seed widget is
# followed by its "control after generate" value.
WIDGETS = {
    "KSampler": ("seed", "control_after_generate", "steps", "cfg", "sampler_name", "scheduler", "denoise"),
    "KSamplerAdvanced": ("add_noise", "noise_seed", "control_after_generate", "steps", "cfg", "sampler_name",
                         "scheduler", "start_at_step", "end_at_step", "return_with_leftover_noise"),
    "SamplerCustom": ("add_noise", "noise_seed", "control_after_generate", "cfg"),
    "BasicScheduler": ("scheduler", "steps", "denoise"),
    "Flux2Scheduler": ("steps", "width", "height"),
    "LTXVScheduler": ("steps", "max_shift", "base_shift", "stretch", "terminal"),
    "ManualSigmas": ("sigmas",),
    "KSamplerSelect": ("sampler_name",),
    "CFGGuider": ("cfg",),
    "ModelSamplingAuraFlow": ("shift",),
    "ModelSamplingSD3": ("shift",),
    "UNETLoader": ("unet_name", "weight_dtype"),
    "Krea2DiffusersLoader": ("model_name", "weight_dtype"),
    "CheckpointLoaderSimple": ("ckpt_name",),
    "LoraLoaderModelOnly": ("lora_name", "strength_model"),
    "FluxGuidance": ("guidance",),
    "CLIPTextEncodeFlux": ("clip_l", "t5xxl", "guidance"),
    "ComfySwitchNode": ("switch",),
    "PrimitiveBoolean": ("value",),
    "PrimitiveInt": ("value", "control_after_generate"),
    "PrimitiveFloat": ("value",),
}
SAMPLERS = ("KSampler", "KSamplerAdvanced", "SamplerCustom", "SamplerCustomAdvanced")
# A model loader, and the widget naming its file (this pack's Krea-2 loader too, to read its own templates).
LOADERS = {"UNETLoader": "unet_name", "CheckpointLoaderSimple": "ckpt_name", "Krea2DiffusersLoader": "model_name"}
SHIFTS = ("ModelSamplingAuraFlow", "ModelSamplingSD3")
SUBGRAPH_INPUT = -10   # the origin id of a link from a subgraph's inputs
BYPASSED = (2, 4)      # a node's mode when muted or bypassed


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One sampler of a template, as it samples."""

    template: str
    model: str                              # the diffusion model's file (its loader's widget)
    steps: int
    cfg: float
    sampler: str
    scheduler: str                          # the scheduler's name, or its node (``Flux2Scheduler``, ``LTXVScheduler``)
    shift: tuple[str, float] | None         # (the ModelSampling node, its shift); None: the model's own
    loras: tuple[tuple[str, float], ...]    # (file, strength) of each LoRA on the model, loader first
    guidance: float | None                  # FluxGuidance / CLIPTextEncodeFlux in the same graph
    steps_range: tuple[int, int] | None     # KSamplerAdvanced's start and end step
    bypassed: bool = False                  # shipped bypassed (a branch the user turns on), not run as shipped
    title: str | None = None                # the sampler node's title


def templates_package_version() -> str:
    from importlib.metadata import version

    return version("comfyui-workflow-templates")


def template_path(template_id: str) -> Path:
    import comfyui_workflow_templates

    return Path(comfyui_workflow_templates.get_asset_path(template_id, f"{template_id}.json"))


class _Graph:
    def __init__(self, data: dict, parent: tuple["_Graph", dict] | None = None):
        self.nodes = {node["id"]: node for node in data.get("nodes", [])}
        self.links = {}
        for link in data.get("links", []):
            if isinstance(link, dict):
                self.links[link["id"]] = (link["origin_id"], link["origin_slot"])
            else:   # [id, origin, origin slot, target, target slot, type]
                self.links[link[0]] = (link[1], link[2])
        self.inputs = [entry["name"] for entry in data.get("inputs", [])]   # a subgraph's inputs, by slot
        self.parent = parent   # (the graph holding the subgraph's node, that node)


class Template:
    def __init__(self, template_id: str, data: dict):
        self.id = template_id
        self.top = _Graph(data)
        definitions = {sub["id"]: sub for sub in data.get("definitions", {}).get("subgraphs", [])}
        self.graphs = [self.top]
        pending = [self.top]
        self.bypassed = set()   # the subgraphs placed by a bypassed node
        while pending:   # each subgraph under the node that places it (nested ones too), as the editor runs it
            graph = pending.pop()
            for node in graph.nodes.values():
                if node["type"] in definitions:
                    sub = _Graph(definitions[node["type"]], parent=(graph, node))
                    self.graphs.append(sub)
                    pending.append(sub)
                    if node.get("mode", 0) in BYPASSED or id(graph) in self.bypassed:
                        self.bypassed.add(id(sub))

    @classmethod
    def load(cls, template_id: str) -> "Template":
        return cls(template_id, json.loads(template_path(template_id).read_text()))

    @classmethod
    def read(cls, path: Path) -> "Template":
        """A workflow file in the editor's format (this pack's templates too)."""
        return cls(path.stem, json.loads(path.read_text()))

    # --- values -----------------------------------------------------------------------------------------------

    def _widget(self, graph: _Graph, node: dict, name: str):
        index = WIDGETS[node["type"]].index(name)
        if graph.parent is not None:   # a widget promoted to the subgraph's node holds the value there
            outer_graph, outer = graph.parent
            promoted = outer.get("properties", {}).get("proxyWidgets", [])
            values = outer.get("widgets_values") or []
            for position, (node_id, widget) in enumerate(promoted):
                if str(node_id) == str(node["id"]) and widget == name and position < len(values):
                    return values[position]
        return node["widgets_values"][index]

    def _origin(self, graph: _Graph, node: dict, name: str):
        """(graph, node, slot) feeding ``node``'s input ``name``; None where it is a widget or unconnected."""
        entry = next((i for i in node.get("inputs", []) if i["name"] == name), None)
        if entry is None or entry.get("link") is None:
            return None
        origin, slot = graph.links[entry["link"]]
        if origin == SUBGRAPH_INPUT:
            outer_graph, outer = graph.parent
            found = self._origin(outer_graph, outer, graph.inputs[slot])
            return found   # None: the subgraph's node holds it as a widget
        return graph, graph.nodes[origin], slot

    def value(self, graph: _Graph, node: dict, name: str):
        """The value ``node`` gets for its input ``name``: its widget's, or what the link feeding it carries."""
        origin = self._origin(graph, node, name)
        if origin is None:
            return self._widget(graph, node, name)
        return self._output(*origin)

    def _output(self, graph: _Graph, node: dict, slot: int):
        kind = node["type"]
        if kind.startswith("Primitive"):
            return self.value(graph, node, "value")
        if kind == "ComfySwitchNode":
            return self.value(graph, node, "on_true" if self.value(graph, node, "switch") else "on_false")
        raise ValueError(f"{self.id}: a value from a {kind} node, which this reader does not follow")

    def _upstream(self, graph: _Graph, node: dict, name: str) -> tuple[_Graph, dict]:
        """The node feeding ``node``'s input ``name`` (a model, a guider...), through switches."""
        origin = self._origin(graph, node, name)
        if origin is None:
            raise ValueError(f"{self.id}: {node['type']} {node['id']} has no {name!r} link")
        graph, source, _ = origin
        while source["type"] == "ComfySwitchNode":
            branch = "on_true" if self.value(graph, source, "switch") else "on_false"
            graph, source, _ = self._origin(graph, source, branch)
        return graph, source

    # --- recipes ----------------------------------------------------------------------------------------------

    def _model_chain(self, graph: _Graph, node: dict):
        """(loader file, shift, LoRAs) of the model ``node`` samples."""
        shift, loras = None, []
        graph, source = self._upstream(graph, node, "model")
        while source["type"] not in LOADERS:
            kind = source["type"]
            if source.get("mode", 0) in BYPASSED:   # a bypassed patch hands its input on
                pass
            elif kind in SHIFTS and shift is None:
                shift = (kind, round(float(self.value(graph, source, "shift")), 4))
            elif kind == "LoraLoaderModelOnly":
                loras.append((self.value(graph, source, "lora_name"),
                              round(float(self.value(graph, source, "strength_model")), 4)))
            graph, source = self._upstream(graph, source, "model")
        return self.value(graph, source, LOADERS[source["type"]]), shift, tuple(reversed(loras))

    def _guidance(self, graph: _Graph):
        for node in graph.nodes.values():
            if node["type"] in ("FluxGuidance", "CLIPTextEncodeFlux") and node.get("mode", 0) not in BYPASSED:
                return float(self.value(graph, node, "guidance"))
        return None

    def recipes(self) -> list[Recipe]:
        """Every sampler's recipe, those shipped bypassed marked so."""
        found = []
        for graph in self.graphs:
            for node in graph.nodes.values():
                if node["type"] not in SAMPLERS:
                    continue
                if node.get("mode", 0) in BYPASSED or id(graph) in self.bypassed:
                    try:
                        found.append(dataclasses.replace(self._recipe(graph, node), bypassed=True))
                    except (KeyError, ValueError):   # a branch off as shipped, built of nodes no recipe here uses
                        pass
                else:
                    found.append(self._recipe(graph, node))
        return found

    def _recipe(self, graph: _Graph, node: dict) -> Recipe:
        kind, steps_range = node["type"], None
        if kind in ("KSampler", "KSamplerAdvanced"):
            model_graph, model_node = graph, node
            steps, cfg = self.value(graph, node, "steps"), self.value(graph, node, "cfg")
            sampler, scheduler = self.value(graph, node, "sampler_name"), self.value(graph, node, "scheduler")
            if kind == "KSamplerAdvanced":
                steps_range = (self.value(graph, node, "start_at_step"), self.value(graph, node, "end_at_step"))
        else:
            if kind == "SamplerCustom":
                model_graph, model_node, cfg = graph, node, self.value(graph, node, "cfg")
            else:
                model_graph, model_node = self._upstream(graph, node, "guider")
                cfg = (self.value(model_graph, model_node, "cfg") if model_node["type"] == "CFGGuider" else 1.0)
            sampler_graph, sampler_node = self._upstream(graph, node, "sampler")
            sampler = self.value(sampler_graph, sampler_node, "sampler_name")
            sigmas_graph, sigmas = self._upstream(graph, node, "sigmas")
            if sigmas["type"] == "ManualSigmas":   # a list of sigmas: a step between each two
                steps = len(str(self.value(sigmas_graph, sigmas, "sigmas")).split(",")) - 1
            else:
                steps = self.value(sigmas_graph, sigmas, "steps")
            scheduler = (self.value(sigmas_graph, sigmas, "scheduler") if sigmas["type"] == "BasicScheduler"
                         else sigmas["type"])
        model, shift, loras = self._model_chain(model_graph, model_node)
        return Recipe(self.id, model, int(steps), round(float(cfg), 4), sampler, scheduler, shift, loras,
                      self._guidance(graph), steps_range, title=node.get("title"))


def recipes(template_id: str) -> list[Recipe]:
    """Every sampler's recipe in ComfyUI's template ``template_id``, as shipped."""
    return Template.load(template_id).recipes()
