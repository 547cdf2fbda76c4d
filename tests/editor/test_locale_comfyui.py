"""The zh locale as the real ComfyUI server serves it (``GET /i18n``) against what it serves of the nodes
(``GET /object_info``): every node of the pack has its zh display name and description, every input (those a
preset shows included, under the editor's ``<combo>_<input>`` key) its zh name and, where it has a tooltip, its zh
tooltip, and every output its name and tooltip. No key names an input the node does not have.

The stats panel's own strings (web/krea2_cachedit.js) come from the same route: locales/en/main.json holds them
under ``krea2_cachedit.panel``, locales/zh/main.json the same keys in Chinese with the same ``{placeholders}``;
every key the extension asks for is in the English file, and every English string is one the extension asks for.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from node_schemas import outputs, pack_node_infos, translatable_inputs

CJK = re.compile(r"[\u4e00-\u9fff]")
REPO = Path(__file__).resolve().parents[2]
EXTENSION = REPO / "web" / "krea2_cachedit.js"
PANEL = ("krea2_cachedit", "panel")


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



def panel_strings(tree: dict) -> dict[str, str]:
    """The panel's strings of one locale's main.json (or of GET /i18n's entry for it), by dotted key."""
    for name in PANEL:
        tree = (tree or {}).get(name)
    flat: dict[str, str] = {}

    def walk(node, prefix):
        for key, value in (node or {}).items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[prefix + key] = value
    walk(tree, "")
    return flat


def first_arguments(source: str, functions: tuple[str, ...]) -> list[str]:
    """The first argument's source text of every call of ``functions`` in the extension."""
    arguments = []
    for match in re.finditer(rf"(?<![\w.])(?:{'|'.join(functions)})\(", source):
        depth, start = 0, match.end()
        for end in range(start, len(source)):
            char = source[end]
            if char in "([{":
                depth += 1
            elif char in ")]}" and depth:
                depth -= 1
            elif char in ",)" and not depth:
                arguments.append(source[start:end])
                break
    return arguments


def keys_the_panel_asks_for() -> tuple[set[str], set[str]]:
    """The extension's literal keys (``t("cached_steps", ...)``, ``t(on ? "on" : "off")``) and the groups it looks
    keys up in by a record's value (``message(`reasons.${reason}`)``)."""
    arguments = first_arguments(EXTENSION.read_text(encoding="utf-8"), ("t", "message"))
    literal = {key for argument in arguments for key in re.findall(r'"([a-z_]+(?:\.[a-z_]+)*)"', argument)}
    groups = {group for argument in arguments for group in re.findall(r"`([a-z_]+)\.\$\{", argument)}
    return literal, groups


def test_i18n_serves_the_stats_panels_strings_in_en_and_zh_under_the_same_keys(comfy_server):
    served = comfy_server.get("/i18n")
    en, zh = panel_strings(served.get("en")), panel_strings(served.get("zh"))
    files = {lang: panel_strings(json.loads((REPO / "locales" / lang / "main.json").read_text(encoding="utf-8")))
             for lang in ("en", "zh")}
    assert en and en == files["en"] and zh == files["zh"], "GET /i18n serves the pack's main.json files as they are"
    assert not sorted(set(en) - set(zh)), f"panel strings missing in zh: {sorted(set(en) - set(zh))}"
    assert not sorted(set(zh) - set(en)), f"zh panel strings English lacks: {sorted(set(zh) - set(en))}"
    untranslated = sorted(key for key, text in zh.items() if not CJK.search(text))
    assert not untranslated, f"zh panel strings without Chinese: {untranslated}"
    placeholders = {key: (re.findall(r"\{(\w+)\}", en[key]), re.findall(r"\{(\w+)\}", zh[key])) for key in en}
    mismatched = {key: pair for key, pair in placeholders.items() if sorted(pair[0]) != sorted(pair[1])}
    assert not mismatched, f"zh strings whose placeholders differ from English ones: {mismatched}"
    print(f"zh coverage of the stats panel: {len(set(en) & set(zh))}/{len(en)} strings")


def test_every_key_the_stats_panel_asks_for_is_in_english_and_every_english_string_is_asked_for(comfy_server):
    en = panel_strings(comfy_server.get("/i18n").get("en"))
    literal, groups = keys_the_panel_asks_for()
    assert len(literal) >= 20 and groups, (literal, groups)   # the extension's lookups were found at all
    assert not sorted(literal - set(en)), f"keys of web/krea2_cachedit.js missing in en: {sorted(literal - set(en))}"
    empty = sorted(group for group in groups if not any(key.startswith(f"{group}.") for key in en))
    assert not empty, f"groups of web/krea2_cachedit.js with no strings in en: {empty}"
    states = set(re.findall(r"(\w+): \"#", re.search(r"STATE_COLORS = \{[^}]*\}", EXTENSION.read_text()).group(0)))
    assert states and not sorted(f"states.{s}" for s in states if f"states.{s}" not in en), states
    unused = sorted(key for key in en if key not in literal and key.split(".")[0] not in groups)
    assert not unused, f"English panel strings web/krea2_cachedit.js never asks for: {unused}"


def test_the_english_locale_names_the_inputs_a_preset_shows_as_their_labels(comfy_root):
    """The editor labels an input a dynamic combo shows by its locale name, never by the schema's display name:
    locales/en/nodeDefs.json gives each such input with a display name that name (and nothing else)."""
    english = json.loads((REPO / "locales" / "en" / "nodeDefs.json").read_text(encoding="utf-8"))
    expected = {}
    for info in pack_node_infos(comfy_root):
        shown = {item.key: item.label for item in translatable_inputs(info)
                 if item.key != item.name and item.label and item.label != item.name}
        if shown:
            expected[info["name"]] = {"inputs": {key: {"name": label} for key, label in shown.items()}}
    assert english == expected
