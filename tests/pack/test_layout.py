"""The layout of adapters/ says what depends on what, and this test holds it.

- ``dbcache`` and ``forecast`` (the two methods) never import each other: a method is added beside them;
- ``record`` imports neither method: a method's own parts of the record come from its plan;
- ``sampling`` and ``families`` import no method: they are what every method shares;
- ``record`` reads what ``sampling`` observed, never the other way: ``sampling`` imports no ``record``;
- no arrow runs back up anywhere: the packages' imports make no circle (``record`` -> ``sampling`` ->
  ``record`` would be one, whichever of the two imports the other);
- nothing in ``adapters`` imports ComfyUI or the pack's ``nodes``: the nodes translate, the adapters work.

Read from the source (every ``import`` and ``from`` statement, also inside functions), not from what a
test happens to import, so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"
PACKAGES = sorted(p.name for p in ADAPTERS.iterdir() if (p / "__init__.py").is_file())
FORBIDDEN = {
    "dbcache": {"forecast"},
    "forecast": {"dbcache"},
    "record": {"dbcache", "forecast"},
    "sampling": {"dbcache", "forecast", "record"},
    "families": {"dbcache", "forecast", "sampling", "record"},
}
FOREIGN = ("comfy", "comfy_api", "comfy_execution", "comfy_extras", "folder_paths", "server", "nodes")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in ``path``, relative ones resolved against adapters' layout
    (``..dbcache.settings`` in ``adapters/record/x.py`` -> ``adapters.dbcache.settings``)."""
    package = ["adapters", *path.relative_to(ADAPTERS).parts[:-1]]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
                names = [module] if node.module else [f"{module}.{alias.name}" for alias in node.names]
                found += [(node.lineno, name) for name in names]
            else:
                found.append((node.lineno, node.module or ""))
    return found


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "krea2_cachedit":
        parts = parts[1:]
    return parts[1] if len(parts) > 1 and parts[0] == "adapters" else None


def test_every_package_has_its_rule_or_is_free_to_import():
    """A new package is placed on purpose: either it has a rule here or it is a leaf the rules need not name."""
    assert set(FORBIDDEN) <= set(PACKAGES), f"a rule names a package that is gone: {set(FORBIDDEN) - set(PACKAGES)}"
    assert {"dbcache", "forecast", "record", "sampling", "families"} <= set(PACKAGES)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_only_what_its_rule_allows(package):
    broken = [f"{path.relative_to(ADAPTERS.parent)}:{line} imports {module}"
              for path in sorted((ADAPTERS / package).rglob("*.py"))
              for line, module in imported_modules(path) if _package_of(module) in FORBIDDEN[package]]
    assert not broken, f"adapters/{package} must not import {sorted(FORBIDDEN[package])}:\n" + "\n".join(broken)


def package_imports() -> dict[str, set[str]]:
    """Each package of adapters/ -> the other packages it imports (read as the rules above read them)."""
    return {package: {imported for path in (ADAPTERS / package).rglob("*.py")
                      for _, module in imported_modules(path)
                      if (imported := _package_of(module)) not in (None, package)}
            for package in PACKAGES}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of ``graph`` once, as the packages along it from its least name back to it."""
    found = []

    def walk(start: str, path: list[str]):
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == start:
                found.append([*path, start])
            elif nxt > start and nxt not in path:
                walk(start, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    return found


def test_no_import_arrow_runs_back_up():
    """The packages' imports make a one-way order: a circle (e.g. ``record`` reading ``sampling``'s observation
    while ``sampling`` reads ``record``'s types) would tie both ends to each other."""
    found = circles(package_imports())
    assert not found, "adapters/ packages import each other in a circle:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_circle_reader_finds_a_circle():
    """The reader itself: a graph with one circle and one plain arrow has exactly that circle (else the test above
    could pass by finding nothing), and the real graph has the arrow from ``record`` to ``sampling``."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    assert "sampling" in package_imports()["record"]


def test_adapters_import_nothing_of_comfyui_or_the_nodes():
    broken = [f"{path.relative_to(ADAPTERS.parent)}:{line} imports {module}"
              for path in sorted(ADAPTERS.rglob("*.py"))
              for line, module in imported_modules(path)
              if module.split(".")[0] in FOREIGN or module.startswith("krea2_cachedit.nodes")]
    assert not broken, "adapters/ knows no ComfyUI and no node:\n" + "\n".join(broken)


def test_the_rule_reads_relative_imports():
    """The reader itself: a relative import two levels up resolves to the sibling package (else the rules above
    could pass by reading nothing)."""
    modules = dict((name, line) for line, name in imported_modules(ADAPTERS / "dbcache" / "cache_run.py"))
    assert "adapters.sampling.sampling_run" in modules and "adapters.dbcache.settings" in modules
    assert _package_of("adapters.forecast.forecast_run") == "forecast"
    assert _package_of("krea2_cachedit.adapters.dbcache.settings") == "dbcache"
