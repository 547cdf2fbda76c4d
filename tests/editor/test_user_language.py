"""What a user reads speaks a user's words, and the pack has one name.

User-facing text: the README, the nodes' names, descriptions and tooltips (the real schema, as the editor
receives it), the help pages (en, zh), the locales and the templates' notes. None of it uses the words of this
project's development side (its test models, tiers, tools). A figure measured on the small trained test
models says so in words ("a small test model trained on drawn shapes, not Krea-2"). Link targets are not read:
a link into the developer docs may name what a user does not.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from node_schemas import pack_node_infos

REPO = Path(__file__).resolve().parents[2]
PACK_NAME = "Cache-DiT for ComfyUI"
# The development side's words; each line says what a user reads instead.
DEV_WORDS = re.compile(r"\b(?:"
                       r"prox(?:y|ies)|stand-ins?|"              # "a small test model trained on drawn shapes"
                       r"kept as theirs|build ids?|"             # "sglang's", "measured by this pack on ..."
                       r"tiers?|devkit|pytest|fixtures?|"        # the test suite's words
                       r"mechanics only|seeded-random|"          # "tested for correctness, no image figures"
                       r"try it from a clone)\b", re.IGNORECASE)


def strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def readable(text: str) -> str:
    """``text`` as a reader sees it: link targets dropped (``[words](target)`` keeps the words)."""
    return re.sub(r"\]\([^)]*\)", "]", text)


def page_texts() -> dict[str, str]:
    pages = {"README.md": (REPO / "README.md").read_text(encoding="utf-8")}
    for page in sorted((REPO / "web" / "docs").rglob("*.md")):
        pages[str(page.relative_to(REPO))] = page.read_text(encoding="utf-8")
    for locale in sorted((REPO / "locales").rglob("*.json")):
        pages[str(locale.relative_to(REPO))] = "\n".join(strings(json.loads(locale.read_text(encoding="utf-8"))))
    for template in sorted((REPO / "example_workflows").glob("*.json")):
        workflow = json.loads(template.read_text())
        notes = [node["widgets_values"][0] for node in workflow["nodes"] if node["type"] in ("MarkdownNote", "Note")]
        pages[f"{template.relative_to(REPO)} (notes)"] = "\n".join(notes)
    return pages


def hits(text: str) -> list[str]:
    text = readable(text)
    return [text[max(0, m.start() - 50):m.end() + 30].replace("\n", " ") for m in DEV_WORDS.finditer(text)]


@pytest.mark.parametrize(("page", "text"), list(page_texts().items()), ids=list(page_texts()))
def test_no_development_words_in_what_a_user_reads(page, text):
    assert not hits(text), f"{page}: development words a user should not meet:\n" + "\n".join(hits(text))


def test_no_development_words_in_the_nodes_as_the_editor_shows_them(comfy_root):
    problems = []
    for info in pack_node_infos(comfy_root):
        texts = [info.get("display_name") or "", info.get("description") or "",
                 *(tip or "" for tip in info.get("output_tooltips") or []), *strings(info["input"])]
        problems += [f"{info['name']}: {hit}" for text in texts for hit in hits(text)]
    assert not problems, "\n".join(problems)


def test_the_words_are_caught():
    """The check itself: each kind of word is found, a link target is not."""
    assert len(hits("on the proxy; a stand-in; tier comfyui; mechanics only; seeded-random; kept as theirs")) == 6
    assert not hits("[the developer page](docs/benchmarks.md#proxy-figures)")


def test_one_name_for_the_pack():
    readme_title = (REPO / "README.md").read_text(encoding="utf-8").splitlines()[0]
    display_name = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["comfy"]["DisplayName"]
    docstring = (REPO / "__init__.py").read_text().split('"""')[1].splitlines()[0]
    assert (readme_title, display_name, docstring) == (f"# {PACK_NAME}", PACK_NAME, f"{PACK_NAME}.")
