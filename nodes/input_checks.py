"""Queue-time checks of a V3 node's widget values against its own schema, whatever JSON they are.

A node that defines ``validate_inputs(cls, **kwargs)`` takes over ComfyUI's own
checks of every input (min/max, combo choices), so ``schema_problem`` makes
them again, and also refuses what ComfyUI lets through: a NaN, which compares
as neither below min nor above max. A refused value never runs: POST /prompt
answers 400 with the message in its ``node_errors``.

Before its checks ComfyUI blurs some JSON kinds: it turns ``true`` into 1 for a
number, passes ``null`` as a linked input's missing value, and a two-item list
is a link even when no such node exists (its validation then fails on the
downstream node's ``model``). ``tag_prompt`` (an on-prompt handler, run before
validation) replaces such values in this pack's widgets by a ``JsonValue``: a
string spelling the JSON (``true``, ``null``, ``nan``) that every check refuses
by name and that the answer echoes as strict JSON.
"""

from __future__ import annotations

import json
import math

from comfy_api.latest import io

_WIDGETS = (io.Combo.Input, io.Int.Input, io.Float.Input, io.String.Input, io.Boolean.Input)


class JsonValue(str):
    """A JSON value of a widget that ComfyUI would otherwise blur, spelled as text."""

    def __new__(cls, value):
        text = json.dumps(value, default=str) if not isinstance(value, float) else repr(value)
        tagged = super().__new__(cls, text)
        tagged.value = value
        return tagged

    def __repr__(self) -> str:
        return str(self)


def widget_specs(inputs: list) -> dict[str, object]:
    """A node's widget inputs by the name a prompt gives them (a dynamic combo's as ``preset.<name>``)."""
    specs = {}
    for spec in inputs:
        if isinstance(spec, io.DynamicCombo.Input):
            specs[spec.id] = spec
            for option in spec.options:
                specs.update({f"{spec.id}.{name}": sub for name, sub in widget_specs(option.inputs).items()})
        elif isinstance(spec, _WIDGETS):
            specs[spec.id] = spec
    return specs


_installed = False


def install(node_classes: list) -> None:
    """Tag the widget values of ``node_classes`` in every prompt ComfyUI is given (once)."""
    global _installed
    if _installed:
        return
    from server import PromptServer

    widgets = {}
    for node in node_classes:
        schema = node.define_schema()
        widgets[schema.node_id] = frozenset(widget_specs(schema.inputs))
    PromptServer.instance.add_on_prompt_handler(lambda json_data: tag_prompt(json_data, widgets))
    _installed = True


def tag_prompt(json_data: dict, widgets: dict[str, frozenset]) -> dict:
    """POST /prompt's body with blurred values tagged in the widgets named by ``widgets`` (node id ->
    its widget names); see the module's doc."""
    prompt = json_data.get("prompt") if isinstance(json_data, dict) else None
    if not isinstance(prompt, dict):
        return json_data
    for node in prompt.values():
        if not isinstance(node, dict) or node.get("class_type") not in widgets:
            continue
        inputs = node.get("inputs")
        if not isinstance(inputs, dict):
            continue
        for name in widgets[node["class_type"]] & inputs.keys():
            if _blurred(inputs[name], prompt):
                inputs[name] = JsonValue(inputs[name])
    return json_data


def _blurred(value, prompt: dict) -> bool:
    if isinstance(value, list):   # a link is [an existing node's id, an output index]
        return not (len(value) == 2 and isinstance(value[1], int) and str(value[0]) in prompt)
    return value is None or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value))


def describe(value) -> str:
    """``value`` as a client sent it, for a message: its JSON kind and, when short, itself."""
    if isinstance(value, JsonValue):
        value = value.value
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value}, not a finite number"
    if isinstance(value, int):
        return _short(str(value))
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return f"the string {_short(value)!r}"
    if isinstance(value, list):
        return f"the list {_short(json.dumps(value, default=str))}"
    if isinstance(value, dict):
        return f"the object {_short(json.dumps(value, default=str))}"
    return f"a {type(value).__name__}"


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def schema_problem(inputs: list, values: dict) -> str | None:
    """What is wrong with the first bad widget value, or None when all are fine.

    ``values`` are the values ComfyUI validates (numbers already converted where it could); a
    linked input has none yet (None) and is left to the node. A dynamic combo's value is its
    chosen key with that option's inputs (``{"preset": key, name: value, ...}``); a key that is
    none of its options never reaches the node (ComfyUI drops it), so a missing one is refused.
    """
    for spec in inputs:
        if isinstance(spec, io.DynamicCombo.Input):
            problem = _dynamic_combo_problem(spec, values.get(spec.id))
        elif isinstance(spec, _WIDGETS):
            problem = value_problem(spec, values.get(spec.id))
        else:
            problem = None
        if problem:
            return problem
    return None


def value_problem(spec, value) -> str | None:
    """What is wrong with one widget's value, or None (also for None: a linked input)."""
    if value is None:
        return None
    if isinstance(spec, io.Combo.Input):
        if isinstance(value, str) and not isinstance(value, JsonValue) and value in spec.options:
            return None
        return _refusal(spec.id, _one_of(spec.options), value)
    if isinstance(spec, (io.Int.Input, io.Float.Input)):
        return _number_problem(spec, value)
    if isinstance(spec, io.String.Input):
        return None if isinstance(value, str) and not isinstance(value, JsonValue) else \
            _refusal(spec.id, "a string", value)
    if isinstance(spec, io.Boolean.Input):
        return None if isinstance(value, bool) else _refusal(spec.id, "true or false", value)
    return None


def _dynamic_combo_problem(spec, chosen) -> str | None:
    keys = [option.key for option in spec.options]
    if not isinstance(chosen, dict) or chosen.get(spec.id) not in keys:
        return f"{spec.id} must be one of {', '.join(map(repr, keys))}: pick one of those."
    [option] = [option for option in spec.options if option.key == chosen[spec.id]]
    return schema_problem(option.inputs, chosen)


def _number_problem(spec, value) -> str | None:
    low, high = spec.min, spec.max
    if not isinstance(value, (bool, JsonValue)) and isinstance(value, (int, float)):
        finite = isinstance(value, int) or math.isfinite(value)
        if finite and (low is None or value >= low) and (high is None or value <= high):
            return None
    default = f"; its default is {spec.default:g}" if spec.default is not None else ""
    return _refusal(spec.id, f"a number{_range_text(low, high)}", value, default)


def _refusal(name: str, expected: str, value, hint: str = "") -> str:
    return f"{name} must be {expected} (got {describe(value)}){hint}."


def _one_of(options) -> str:
    return f"one of {', '.join(map(repr, options))}"


def _range_text(low, high) -> str:
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}"
    if low is None and high is None:
        return ""
    return f" at least {low:g}" if low is not None else f" at most {high:g}"
