"""How the graph editor lays a node's inputs out in a UI-format workflow.

Shared by tests/test_example_workflows.py (reading the examples) and
tools/make_example_workflows.py (writing them), so both agree by construction.
"""

from __future__ import annotations

WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
UI_ONLY_TYPES = {"MarkdownNote", "Note"}  # the editor's own nodes; never sent to the server


def ordered_inputs(info: dict):
    """(name, type, options, is_widget) for each input, in the order the editor lays them out.

    COMBO choices come as ``[choices, opts]`` (V1 nodes) or ``["COMBO", {"options": ...}]`` (V3);
    both end up in ``opts["options"]``.
    """
    for section in ("required", "optional"):
        for name in info.get("input_order", {}).get(section, []):
            spec = info["input"][section][name]
            opts = dict((spec[1] if len(spec) > 1 else None) or {})
            kind = spec[0]
            if isinstance(kind, list):
                kind, opts["options"] = "COMBO", kind
            yield name, kind, opts, kind in WIDGET_TYPES and not opts.get("forceInput")


def has_control_widget(name: str, kind: str, opts: dict) -> bool:
    """Whether the editor stores a control_after_generate value after this widget's value."""
    control = opts.get("control_after_generate")
    if control is None:  # the editor adds it to INT seeds unless told otherwise
        return kind == "INT" and name in ("seed", "noise_seed")
    return bool(control)
