"""The README and docs/*.md: every relative link and #anchor resolves, every docs page can be
reached from the README, and the README stays short (at most 200 lines). Every repository path named
in those pages, the help pages and the Python files (``adapters/x.py``, ``docs/y.md``, ...) exists.

Anchors are matched against the headings as GitHub slugs them: the heading's text (link text
for links, code without its backticks), lower-cased, everything but letters, digits, spaces,
hyphens and underscores dropped, spaces turned into hyphens; a repeated slug gets -1, -2, ...
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_MAX_LINES = 200

FENCE = re.compile(r"^ {0,3}(```+|~~~+)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


# A repository path as pages and comments name it: a top-level folder of the repository, then a file
# (not a glob or a pattern such as ``test_families_<family>_comfyui.py``), not inside another path.
REPO_PATH = re.compile(r"(?<![\w/.-])(?:adapters|nodes|web|tests|devkit|benchmarks|tools|docs|example_workflows|locales)"
                       r"/[\w/.-]*\w\.(?:py|md|json|js|mjs)(?![\w*<])")
# Paths named that are not the repository's own files.
NOT_REPOSITORY_FILES = {
    "adapters/record/x.py",          # tests/pack/test_layout.py: an example of how a relative import resolves
    "docs/benchmark/NVIDIA_GPU.md",  # cache-dit's repository, where its own figures come from
    "tools/convert.py",              # ComfyUI-GGUF's conversion tool
}
CODE_FOLDERS = ("adapters", "nodes", "devkit", "benchmarks", "tools", "tests")


def files_naming_paths() -> list[Path]:
    """The pages and the Python files whose paths must exist: the README, docs/*.md, the help pages, and
    every Python file of the pack, its tests and its development code."""
    python = [p for folder in CODE_FOLDERS for p in (REPO / folder).rglob("*.py")
              if "node_modules" not in p.parts and "__pycache__" not in p.parts
              and p != Path(__file__).resolve()]  # this file names missing paths to show they are found
    return [*doc_files(), *sorted((REPO / "web" / "docs").rglob("*.md")),
            *sorted(REPO.glob("*.py")), *sorted(python)]


def made_by_a_run(found: str) -> bool:
    """A path git ignores (``tests/artifacts/...``): a run writes it, a fresh clone has none."""
    return subprocess.run(["git", "check-ignore", "-q", found], cwd=REPO).returncode == 0


def missing_paths(path: Path) -> list[str]:
    """'line: path' for each repository path ``path`` names that is not there."""
    return [f"{number}: {found}" for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for found in REPO_PATH.findall(line)
            if found not in NOT_REPOSITORY_FILES and not (REPO / found).exists() and not made_by_a_run(found)]


def doc_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def split_code(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    prose, fence = [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * len(match.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        prose.append(line)
    return prose


def github_slug(heading: str) -> str:
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose = split_code(path.read_text(encoding="utf-8"))
    found, seen = set(), {}
    for line in prose:
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[str]:
    prose = split_code(path.read_text(encoding="utf-8"))
    text = CODE_SPAN.sub("", "\n".join(prose))
    return INLINE_LINK.findall(text) + REFERENCE_DEF.findall(text)


def broken_links(path: Path) -> list[str]:
    """'target: why' for each relative link in ``path`` that does not resolve."""
    broken = []
    for target in links(path):
        if not target or SCHEME.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            broken.append(f"{target}: no heading of {dest.name} slugs to #{anchor}")
    return broken


def test_every_relative_link_and_anchor_resolves():
    broken = {str(p.relative_to(REPO)): b for p in doc_files() if (b := broken_links(p))}
    assert not broken, f"broken links: {broken}"


def test_every_docs_page_is_reachable_from_the_readme():
    reached, todo = {README.resolve()}, [README]
    while todo:
        page = todo.pop()
        for target in links(page):
            file_part = target.partition("#")[0]
            if not file_part or SCHEME.match(target):
                continue
            dest = (page.parent / unquote(file_part)).resolve()
            if dest.suffix == ".md" and dest.exists() and dest not in reached:
                reached.add(dest)
                todo.append(dest)
    unreached = [str(p.relative_to(REPO)) for p in doc_files() if p.resolve() not in reached]
    assert not unreached, f"docs pages no link path from README.md reaches: {unreached}"


def test_readme_is_at_most_200_lines():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}"


def test_slugs_and_broken_links_are_found_as_github_would(tmp_path):
    assert github_slug("Cache-DiT DBCache (any supported DiT) (`CacheDiTDBCache`, category Krea-2)") \
        == "cache-dit-dbcache-any-supported-dit-cacheditdbcache-category-krea-2"
    assert github_slug("Krea-2's text path") == "krea-2s-text-path"
    assert github_slug("Against EasyCache and LazyCache (proxy figures)") \
        == "against-easycache-and-lazycache-proxy-figures"
    assert github_slug("See [the stats](stats.md)") == "see-the-stats"
    (tmp_path / "other.md").write_text("# Title\n\n## Part\n\n## Part\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#part-1) [ok](#page) [ok](https://example.com/x#y) `[code](nope.md)`\n"
        "[no file](missing.md) [no anchor](other.md#parts) [no local anchor](#nowhere)\n"
        "```\n[in a fence](fenced.md)\n# not a heading\n```\n", encoding="utf-8")
    assert anchors(other := tmp_path / "other.md") == {"title", "part", "part-1"}, anchors(other)
    assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "other.md#parts", "#nowhere"]


def test_every_repository_path_named_exists():
    missing = {str(p.relative_to(REPO)): m for p in files_naming_paths() if (m := missing_paths(p))}
    assert not missing, f"paths named that are not in the repository: {missing}"


def test_paths_are_found_as_they_are_named(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("`adapters/figures.py` and adapters/nowhere.py, a glob docs/*.md, a pattern\n"
                    "tests/families/test_families_<family>_comfyui.py, ComfyUI's comfy/ldm/x.py and other/tests/y.py,\n"
                    "(benchmarks/results/gone.json): and the example adapters/record/x.py\n", encoding="utf-8")
    assert missing_paths(page) == ["1: adapters/nowhere.py", "3: benchmarks/results/gone.json"]
