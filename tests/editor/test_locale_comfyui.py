"""The zh locale as the real ComfyUI server serves it (``GET /i18n``) against what it serves of the nodes
(``GET /object_info``): every node of the pack has its zh display name and description, every input (those a
preset shows included, under the editor's ``<combo>_<input>`` key) its zh name and, where it has a tooltip, its zh
tooltip, and every output its name and tooltip. No key names an input the node does not have.
"""

from __future__ import annotations

import re

from node_schemas import outputs, pack_node_infos, translatable_inputs

CJK = re.compile(r"[\u4e00-\u9fff]")


def zh_entries(server) -> dict:
    return server.get("/i18n")["zh"]["nodeDefs"]


def test_i18n_serves_a_zh_entry_for_every_input_and_output_of_every_node(comfy_server, comfy_root):
    served = zh_entries(comfy_server)
    object_info = comfy_server.get("/object_info")
    nodes = [info["name"] for info in pack_node_infos(comfy_root)]
    assert nodes and all(node in object_info for node in nodes), nodes
    problems, counts = [], {"nodes": 0, "inputs": 0, "tooltips": 0}
    for node in nodes:
        info, entry = object_info[node], served.get(node)
        if entry is None:
            problems.append(f"{node}: no zh entry")
            continue
        counts["nodes"] += 1
        for field in ("display_name", "description"):
            if not CJK.search(entry.get(field) or ""):
                problems.append(f"{node}.{field}: not translated ({entry.get(field)!r})")
        inputs = translatable_inputs(info)
        for item in inputs:
            zh = entry.get("inputs", {}).get(item.key, {})
            if not zh.get("name"):
                problems.append(f"{node}.inputs.{item.key}.name missing")
            else:
                counts["inputs"] += 1
            if item.tooltip:
                if not CJK.search(zh.get("tooltip") or ""):
                    problems.append(f"{node}.inputs.{item.key}.tooltip missing or untranslated")
                else:
                    counts["tooltips"] += 1
        extra = set(entry.get("inputs", {})) - {item.key for item in inputs}
        if extra:
            problems.append(f"{node}: zh keys of inputs the node does not have: {sorted(extra)}")
        for index, (name, tooltip) in enumerate(outputs(info)):
            zh = entry.get("outputs", {}).get(str(index), {})
            if not zh.get("name") or (tooltip and not CJK.search(zh.get("tooltip") or "")):
                problems.append(f"{node}.outputs.{index} ({name}): name or tooltip missing")
    total_inputs = sum(len(translatable_inputs(object_info[n])) for n in nodes)
    total_tooltips = sum(1 for n in nodes for item in translatable_inputs(object_info[n]) if item.tooltip)
    print(f"zh coverage: nodes {counts['nodes']}/{len(nodes)}, inputs {counts['inputs']}/{total_inputs}, "
          f"tooltips {counts['tooltips']}/{total_tooltips}")
    assert not problems, "the zh locale against /object_info:\n" + "\n".join(problems)

