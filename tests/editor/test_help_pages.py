"""The nodes' help pages, which the graph editor's node library shows ("?" on a node, or its Info tab).

The editor fetches a custom node's page from ``/extensions/<pack>/docs/<node id>/<locale>.md`` and falls back to
``/extensions/<pack>/docs/<node id>.md``: the English page is ``web/docs/<node id>.md``, the Chinese one
``web/docs/<node id>/zh.md``. Each page titles the node by its display name (the zh page by the zh locale's) and
gives every input its own list item (``- `name` ...``) carrying the input's label (the schema's display name, the
zh locale's name) and its tooltip: the English page the schema's, the zh page the zh locale's. A cache node's page
has an evidence section (``## Evidence``, ``## 依据``): the figures behind its defaults, masks and presets live
there, not in the tooltips; the forecast node's English page quotes every preset's summary.
tests/editor/test_help_browser.py checks that the editor shows them.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from node_schemas import pack_node_infos, translatable_inputs

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "web" / "docs"
ZH_NODE_DEFS = REPO / "locales" / "zh" / "nodeDefs.json"
LOCALES = {"en": lambda node: DOCS / f"{node}.md", "zh": lambda node: DOCS / node / "zh.md"}


def node_ids_in_source() -> list[str]:
    """The classes listed in ``NODES`` in nodes/__init__.py (each class is named as its node id)."""
    tree = ast.parse((REPO / "nodes" / "__init__.py").read_text())
    (value,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(target, "id", None) == "NODES" for target in node.targets)]
    return [element.id for element in value.elts]


def flat(text: str) -> str:
    return " ".join(text.split())


def first_line(tooltip: str) -> str:
    """A multi-line tooltip (the forecast node's preset list) is quoted by its first line."""
    return flat(tooltip.splitlines()[0])


def test_every_node_has_an_english_and_a_zh_page_and_every_page_a_node():
    nodes = node_ids_in_source()
    assert len(nodes) == 5, nodes
    missing = [str(path(node).relative_to(REPO)) for node in nodes for path in LOCALES.values()
               if not path(node).is_file()]
    assert not missing, f"help pages missing: {missing}"
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    expected = {str(path(node).relative_to(DOCS)) for node in nodes for path in LOCALES.values()}
    assert pages == expected, f"pages that no node has: {sorted(pages - expected)}"
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        assert text.startswith("# "), f"{page} does not start with the node's title"
        headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
        assert len(headings) >= 3, f"{page}: inputs, evidence, checking the image, mistakes: {headings}"


@pytest.fixture(scope="module")
def node_infos(comfy_root) -> dict[str, dict]:
    return {info["name"]: info for info in pack_node_infos(comfy_root)}


def test_the_pages_cover_the_nodes_that_the_pack_registers(node_infos):
    assert list(node_infos) == node_ids_in_source()


@pytest.mark.parametrize("node", node_ids_in_source())
def test_every_input_has_its_line_and_tooltip_on_both_pages(node_infos, node):
    info = node_infos[node]
    zh = json.loads(ZH_NODE_DEFS.read_text(encoding="utf-8"))[node]
    titles = {"en": info["display_name"], "zh": zh["display_name"]}
    problems = []
    for locale, path in LOCALES.items():
        text = path(node).read_text(encoding="utf-8")
        if text.splitlines()[0] != f"# {titles[locale]}":
            problems.append(f"{locale}: the title is {text.splitlines()[0]!r}, not '# {titles[locale]}'")
        for item in translatable_inputs(info):
            lines = [line for line in text.splitlines() if line.startswith(f"- `{item.name}`")]
            if not lines:
                problems.append(f"{locale}: no line '- `{item.name}` ...' for the input {item.name}")
                continue
            tooltip = item.tooltip if locale == "en" else zh["inputs"].get(item.key, {}).get("tooltip")
            if tooltip and first_line(tooltip) not in flat(lines[0]):
                problems.append(f"{locale}: the line of {item.name} does not carry its tooltip {first_line(tooltip)!r}")
            label = item.label if locale == "en" else zh["inputs"].get(item.key, {}).get("name")
            if label and label != item.name and label not in lines[0]:
                problems.append(f"{locale}: the line of {item.name} does not name its label {label!r}")
    assert not problems, f"{node}'s help pages:\n" + "\n".join(problems)


EVIDENCE = {"en": "## Evidence", "zh": "## 依据"}
CACHE_NODES = ["Krea2CacheDiT", "CacheDiTDBCache", "CacheDiTSpectrum"]


@pytest.mark.parametrize("node", CACHE_NODES)
def test_a_cache_nodes_pages_have_an_evidence_section(node):
    for locale, path in LOCALES.items():
        headings = re.findall(r"^## .+$", path(node).read_text(encoding="utf-8"), re.MULTILINE)
        assert EVIDENCE[locale] in headings, f"{path(node).relative_to(REPO)}: {headings}"


# The words each page's preset table ends a fixed preset's row with: where its figures hold, and what to use elsewhere.
HOLDS_AT = {"en": "| {steps} steps; at other step counts use `auto` |", "zh": "| {steps} 步；其他步数请用 `auto` |"}


@pytest.mark.parametrize("locale", ["en", "zh"])
def test_every_fixed_presets_row_says_where_its_figures_hold(locale):
    from krea2_cachedit.adapters.figures import PRESET_STANDINGS, preset_measured_steps

    lines = LOCALES[locale]("CacheDiTSpectrum").read_text(encoding="utf-8").splitlines()
    wrong = []
    for name in dict.fromkeys(s.setting for s in PRESET_STANDINGS):
        (row,) = [line for line in lines if line.startswith(f"| `{name}` |")]
        if not row.endswith(HOLDS_AT[locale].format(steps=preset_measured_steps(name))):
            wrong.append(row)
    assert not wrong, f"preset rows that do not say the step count their figures hold at: {wrong}"


def test_the_forecast_page_gives_every_presets_summary():
    from krea2_cachedit.adapters.forecast.forecast_settings import PRESETS

    text = flat((DOCS / "CacheDiTSpectrum.md").read_text(encoding="utf-8"))
    missing = [name for name, preset in PRESETS.items() if f"| `{name}` | {preset.summary} |" not in text]
    assert not missing, f"presets whose summary web/docs/CacheDiTSpectrum.md does not give: {missing}"
