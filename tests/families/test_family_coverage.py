"""Every family the registry supports has a test spec, a row in the README's table of supported models
and a word in docs/families.md: a new registry entry without them fails here, by name.

A family is covered by a test spec when one of ``FAMILIES`` (devkit/family_prompts.py) names it, or
when it is loaded only through the pack's own loader, whose tests name it in ``LOADER_ONLY`` below. Every
spec has a ``FamilyHarness`` (tests/support/family_harness.py), on which the family scenario set of
tests/families/test_family_scenarios_comfyui.py runs.
"""

from __future__ import annotations

import re
from pathlib import Path

from family_harness import HARNESSES
from devkit.family_prompts import FAMILIES
from krea2_cachedit.adapters.families.registry import SUPPORTED

REPO = Path(__file__).resolve().parents[2]
# Families whose checkpoints only the pack's own loader opens: their tests, not the shared family checks.
LOADER_ONLY = {"Krea-2 (diffusers)": ("test_loader_comfyui.py", "test_gguf_comfyui.py")}


def file_of(name: str) -> Path:
    """A test file by its name, in whichever group folder of tests/ it is."""
    found = sorted((REPO / "tests").glob(f"*/{name}"))
    assert len(found) == 1, f"tests/*/{name}: {len(found)} files"
    return found[0]


def spec_names() -> set[str]:
    return {spec.name for spec in FAMILIES.values()}


def readme_model_cells() -> list[str]:
    """The first column of the README's table of supported models (its header's first cell is "model")."""
    cells, in_table = [], False
    for line in (REPO / "README.md").read_text().splitlines():
        row = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if row is None:
            if in_table:
                break
            continue
        if not in_table:
            in_table = row[0].lower() == "model"
            continue
        if not re.fullmatch(r":?-+:?", row[0]):
            cells.append(row[0])
    return cells


def test_every_supported_family_has_a_test_spec():
    missing = [family.name for family in SUPPORTED
               if family.name not in spec_names() and family.name not in LOADER_ONLY]
    assert not missing, (f"no test spec names {missing}: add one to devkit/family_prompts.py's FAMILIES "
                         "(or, for a family only the pack's loader opens, to LOADER_ONLY with its tests)")


def test_loader_only_families_are_named_by_their_tests():
    for name, test_files in LOADER_ONLY.items():
        assert name in {family.name for family in SUPPORTED}, f"LOADER_ONLY names {name!r}, not in the registry"
        for test_file in test_files:
            assert name in file_of(test_file).read_text(), f"{test_file} never checks {name!r}"


def test_every_family_has_a_harness():
    """The scenario set runs on a spec only through its harness: a spec without one would run none of it."""
    missing = sorted(set(FAMILIES) - set(HARNESSES))
    assert not missing, f"no FamilyHarness in tests/support/family_harness.py's HARNESSES for the specs {missing}"
    assert all(harness.family == key for key, harness in HARNESSES.items())


def test_every_spec_names_a_supported_family():
    supported = {family.name for family in SUPPORTED}
    stray = sorted(spec_names() - supported)
    assert not stray, f"test specs name families the registry does not have: {stray}"


def test_the_readme_table_names_every_supported_model():
    cells = readme_model_cells()
    assert cells, "README.md has no table of supported models (a table whose first header cell is 'model')"
    missing = sorted({family.model for family in SUPPORTED
                      if not any(family.model in cell for cell in cells)})
    assert not missing, f"README.md's table of supported models does not name {missing}"


def test_docs_families_names_every_supported_model():
    text = (REPO / "docs" / "families.md").read_text()
    missing = sorted({family.model for family in SUPPORTED if family.model not in text})
    assert not missing, f"docs/families.md does not name {missing}"
