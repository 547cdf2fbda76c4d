"""How the graph editor lays a node's inputs out in a UI-format workflow, and the API prompt it queues.

Shared by the tests that read the examples (tests/editor/test_example_workflows.py,
tests/pack/test_manager_install.py) and tools/make_example_workflows.py (writing them),
so both agree by construction.
"""

from __future__ import annotations

WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
# A V3 dynamic combo (the Forecast node's ``preset``): a combo of its options' keys, whose chosen option may show
# inputs of its own. The editor stores the chosen key as the widget's value and queues it under the input's name.
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
UI_ONLY_TYPES = {"MarkdownNote", "Note"}  # the editor's own nodes; never sent to the server


def ordered_inputs(info: dict):
    """(name, type, options, is_widget) for each input, in the order the editor lays them out.

    COMBO choices come as ``[choices, opts]`` (V1 nodes) or ``["COMBO", {"options": ...}]`` (V3);
    both end up in ``opts["options"]``; a dynamic combo is a COMBO of its options' keys (``opts["dynamic"]``: key ->
    the option's own inputs). A multi-typed input (``"FLOAT,INT"``) with a ``widgetType`` is a
    widget of that type, as the editor shows it (LTXVEmptyLatentAudio's frame_rate).
    """
    for section in ("required", "optional"):
        for name in info.get("input_order", {}).get(section, []):
            spec = info["input"][section][name]
            opts = dict((spec[1] if len(spec) > 1 else None) or {})
            kind = spec[0]
            if isinstance(kind, list):
                kind, opts["options"] = "COMBO", kind
            elif kind == DYNAMIC_COMBO:
                opts["dynamic"] = {option["key"]: option.get("inputs") or {} for option in opts["options"]}
                kind, opts["options"] = "COMBO", list(opts["dynamic"])
            elif opts.get("widgetType") in WIDGET_TYPES:  # a multi-typed input ("FLOAT,INT") shown as that widget
                kind = opts["widgetType"]
            yield name, kind, opts, kind in WIDGET_TYPES and not opts.get("forceInput")


def has_control_widget(name: str, kind: str, opts: dict) -> bool:
    """Whether the editor stores a control_after_generate value after this widget's value."""
    control = opts.get("control_after_generate")
    if control is None:  # the editor adds it to INT seeds unless told otherwise
        return kind == "INT" and name in ("seed", "noise_seed")
    return bool(control)


def widget_values(node: dict, info: dict) -> dict[str, tuple]:
    """name -> (value, control value or None), read positionally from ``widgets_values``."""
    values = list(node.get("widgets_values", []))
    out = {}
    for name, kind, opts, is_widget in ordered_inputs(info):
        if not is_widget:
            continue
        assert values, f"node {node['id']} ({node['type']}): no widget value for '{name}'"
        value = values.pop(0)
        # An option with inputs of its own (the Forecast node's ``custom``) lays them out after the key: not read here.
        assert not any(opts.get("dynamic", {}).get(value, {}).values()), \
            f"node {node['id']} ({node['type']}): '{name}' = {value!r} has inputs of its own, not read here"
        out[name] = (value, values.pop(0) if has_control_widget(name, kind, opts) else None)
    assert not values, f"node {node['id']} ({node['type']}): {len(values)} widget values left over: {values}"
    return out


def to_api_prompt(workflow: dict, object_info: dict) -> dict:
    """The API prompt the editor would queue for this workflow."""
    links = {link[0]: link for link in workflow["links"]}  # [id, src, src_slot, dst, dst_slot, type]
    prompt = {}
    for node in workflow["nodes"]:
        if node["type"] in UI_ONLY_TYPES:
            continue
        assert node.get("mode", 0) == 0, f"node {node['id']} is muted or bypassed"
        info = object_info[node["type"]]
        linked = {inp["name"]: links[inp["link"]] for inp in node.get("inputs", []) if inp.get("link") is not None}
        widgets = widget_values(node, info)
        inputs = {}
        for name, _, _, is_widget in ordered_inputs(info):
            if name in linked:  # a socket, or a widget converted to an input: the link wins
                inputs[name] = [str(linked[name][1]), linked[name][2]]
            elif is_widget:
                inputs[name] = widgets[name][0]
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return prompt
