"""The test tiers (tests/conftest.py): what puts a test in a tier, ``--tier``, the per-tier report and the
durations file, and ``dev.py tier-times`` and ``dev.py test --tier``'s reading of its arguments.

A small test module runs in its own pytest with this suite's conftest loaded as a plugin, so the rules
are checked as a run applies them, one test per way of reaching ComfyUI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS_DIR = REPO / "tests"

# comfy_root stands for ComfyUI here (the tier rules look for it by name): this module's own, so the
# rules are checked with or without a ComfyUI on the machine.
MODULE = '''
import time

import pytest

# Each test takes a measurable time, so a tier's seconds that miss or double a test differ by more
# than the file's rounding.
TAKES_S = 0.05


@pytest.fixture(scope="session")
def comfy_root(tmp_path_factory):
    return tmp_path_factory.mktemp("comfyui")


@pytest.fixture(scope="session")
def a_server(comfy_root):
    return comfy_root


def test_plain():
    time.sleep(TAKES_S)


def test_names_comfy_root(comfy_root):
    time.sleep(TAKES_S)


def test_takes_its_server_by_name(request):
    time.sleep(TAKES_S)
    request.getfixturevalue("a_server")


@pytest.mark.comfyui
def test_marked_takes_its_server_by_name(request):
    time.sleep(TAKES_S)
    request.getfixturevalue("a_server")


@pytest.mark.tier("proxy")
def test_in_its_own_tier(request):
    time.sleep(TAKES_S)
    request.getfixturevalue("a_server")
'''


def run_tiers(tmp_path: Path, *args: str, require: str = "") -> tuple[subprocess.CompletedProcess, dict | None]:
    """The module above run by pytest with this suite's conftest, and the durations file the run kept."""
    module = tmp_path / "test_tiered.py"
    module.write_text(MODULE)
    durations = tmp_path / "durations.json"
    durations.unlink(missing_ok=True)
    # The conftest as a plugin, imported as the suite imports it: from tests/, with the suite's import roots.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR / "support"), str(REPO), os.environ.get("PYTHONPATH", "")]),
               KREA2_REQUIRE_TIERS=require)
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider",
                             "--rootdir", str(tmp_path), "--durations-json", str(durations), *args, str(module)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return result, json.loads(durations.read_text()) if durations.exists() else None


def test_a_test_labelled_core_that_resolves_comfyui_fails_naming_itself(tmp_path):
    result, kept = run_tiers(tmp_path)
    assert result.returncode == 1, result.stdout
    tiers = {test["nodeid"].split("::")[1]: (test["tier"], test["outcome"]) for test in kept["tests"]}
    assert tiers == {"test_plain": ("core", "passed"),
                     "test_names_comfy_root": ("comfyui", "passed"),
                     "test_takes_its_server_by_name": ("core", "failed"),
                     "test_marked_takes_its_server_by_name": ("comfyui", "passed"),
                     "test_in_its_own_tier": ("proxy", "passed")}
    assert "test_takes_its_server_by_name is in the core tier but resolved ComfyUI" in result.stdout
    assert "TIER core: FAILED (1 passed, 1 failed)" in result.stdout
    assert "TIER comfyui: PASSED (2 passed)" in result.stdout
    assert "selected per tier: core 2, comfyui 2, proxy 1" in result.stdout


def test_each_run_reports_and_keeps_its_tiers_durations_and_slowest_tests(tmp_path):
    result, kept = run_tiers(tmp_path, "-k", "not test_takes_its_server_by_name")
    assert result.returncode == 0, result.stdout
    assert [kept["tiers"][name]["tests"] for name in ("core", "comfyui", "proxy")] == [1, 2, 1]
    assert kept["tiers"]["browser"]["verdict"] == "NOT RUN"
    assert kept["wall_s"] >= sum(test["seconds"] for test in kept["tests"]) > 0
    for name, tier in kept["tiers"].items():
        tests = [test["seconds"] for test in kept["tests"] if test["tier"] == name]
        # The file rounds a tier's seconds to 0.01 and each test's to 0.001: their sum differs by that, no more.
        assert abs(tier["seconds"] - sum(tests)) <= 0.005 + 0.0005 * len(tests) + 1e-9, (name, tier, tests)
    lines = result.stdout.splitlines()
    slowest = lines[lines.index("slowest 4:") + 1:][:4]
    assert sorted((line.split()[3].split("::")[1], line.split()[2]) for line in slowest) == sorted(
        [("test_plain", "core"), ("test_names_comfy_root", "comfyui"),
         ("test_marked_takes_its_server_by_name", "comfyui"), ("test_in_its_own_tier", "proxy")])
    assert float(slowest[0].split()[0]) >= float(slowest[-1].split()[0])

    table = subprocess.run([sys.executable, REPO / "dev.py", "tier-times", tmp_path / "durations.json"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert table[0] == "| tier | tests | passed | skipped | failed | minutes |"
    assert [row.split("|")[1:3] for row in table[2:]] == [[" core ", " 1 "], [" comfyui ", " 2 "], [" proxy ", " 1 "],
                                                           [" all ", " 4 "]]


def test_tier_runs_only_the_tiers_named_and_a_required_tier_left_out_fails(tmp_path):
    result, kept = run_tiers(tmp_path, "--tier", "comfyui", "--tier=proxy")
    assert result.returncode == 0, result.stdout
    assert sorted(test["tier"] for test in kept["tests"]) == ["comfyui", "comfyui", "proxy"]
    assert "selected per tier: comfyui 2, proxy 1 (2 deselected)" in result.stdout
    assert "TIER core" not in result.stdout

    # What .ci/run relies on: a required tier that did not run fails the run, --tier or not.
    result, _ = run_tiers(tmp_path, "--tier", "comfyui", require="comfyui,browser")
    assert result.returncode == 1, result.stdout
    assert "TIER browser: NOT RUN (no tests selected)" in result.stdout.split("CI requires every listed tier")[1]

    result, _ = run_tiers(tmp_path, "--tier", "comfyui,bogus", "--collect-only")
    assert result.returncode == 4 and "--tier bogus: no such tier" in result.stderr


def test_a_server_taken_by_name_is_comfyui_in_the_suite():
    """The family scenarios take their server by name; ``--tier comfyui`` selects them, not the layout test."""
    scenarios = "tests/families/test_family_scenarios_comfyui.py"
    # A collection only, whatever tiers the run around it requires (CI's KREA2_REQUIRE_TIERS would fail it).
    env = {k: v for k, v in os.environ.items() if k != "KREA2_REQUIRE_TIERS"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                             "--tier", "comfyui", scenarios, "tests/pack/test_layout.py"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    listed = [line for line in result.stdout.splitlines() if "::" in line]
    assert listed and all(line.startswith(scenarios) for line in listed)
    deselected = len([line for line in subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "tests/pack/test_layout.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300).stdout.splitlines() if "::" in line])
    assert f"selected per tier: comfyui {len(listed)} ({deselected} deselected)" in result.stdout


def test_dev_test_reads_the_tiers_among_pytests_arguments():
    chosen = subprocess.run([sys.executable, "-c", "import dev; print(','.join(dev.chosen_tiers("
                             "['-q', '--tier', 'core', '-k', 'x', '--tier=comfyui,proxy', '--tier', 'core'])))"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    assert chosen == "core,comfyui,proxy"


def test_not_tier_leaves_a_tier_out_and_a_required_tier_left_out_fails(tmp_path):
    result, kept = run_tiers(tmp_path, "--not-tier", "proxy", "-k", "not test_takes_its_server_by_name")
    assert result.returncode == 0, result.stdout
    assert sorted(test["tier"] for test in kept["tests"]) == ["comfyui", "comfyui", "core"]
    assert "TIER proxy" not in result.stdout and "TIER core: PASSED" in result.stdout

    result, _ = run_tiers(tmp_path, "--not-tier", "proxy", require="proxy")
    assert result.returncode == 1 and "TIER proxy: NOT RUN" in result.stdout


def test_workers_side_by_side_report_and_keep_the_same_tiers_as_one_run(tmp_path):
    """Under pytest-xdist (``dev.py test`` runs two workers) the workers collect and run the tests; the
    controller counts, keeps the record and gives the verdicts from their reports."""
    result, kept = run_tiers(tmp_path, "-n", "2", "-k", "not test_takes_its_server_by_name",
                             require="core,comfyui,proxy")
    assert result.returncode == 0, result.stdout
    assert [kept["tiers"][name]["tests"] for name in ("core", "comfyui", "proxy")] == [1, 2, 1]
    [selected] = [line for line in result.stdout.splitlines() if line.startswith("selected per tier: ")]
    assert sorted(selected.removeprefix("selected per tier: ").split(", ")) == ["comfyui 2", "core 1", "proxy 1"]
    assert "TIER comfyui: PASSED (2 passed)" in result.stdout
    assert "CI requires" not in result.stdout

    result, kept = run_tiers(tmp_path, "-n", "2")
    assert result.returncode == 1
    assert {test["nodeid"].split("::")[1]: test["outcome"] for test in kept["tests"]}[
        "test_takes_its_server_by_name"] == "failed"


def test_dev_test_runs_the_realshape_tier_after_the_others_and_merges_their_records():
    script = ("import dev, json\n"
              "for args in ([], ['--tier', 'comfyui'], ['--tier=realshape'], ['tests/pack', '-k', 'x']):\n"
              "    print(json.dumps([[p.name, p.args, p.required, p.env] for p in dev.planned_phases("
              "args, ['core', 'comfyui', 'realshape'], 2)]))\n"
              "a = {'args': ['a'], 'selected_tiers': [], 'wall_s': 2.0, 'tests': [{'nodeid': 'x'}],\n"
              "     'tiers': {'core': {'tests': 1}, 'realshape': {'tests': 0}}}\n"
              "b = {'args': ['b'], 'selected_tiers': ['realshape'], 'wall_s': 3.0, 'tests': [{'nodeid': 'y'}],\n"
              "     'tiers': {'realshape': {'tests': 2}}}\n"
              "print(json.dumps(dev.merged_durations([a, b])))\n")
    lines = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    every, comfyui, realshape, paths = (json.loads(line) for line in lines[:4])
    assert every == [["together", ["--not-tier=realshape", "-n", "2", "--dist", "loadfile"], ["core", "comfyui"],
                      {"OMP_NUM_THREADS": "1"}],
                     ["alone", ["--tier=realshape"], ["realshape"], {}]]
    assert [phase[0] for phase in comfyui] == ["together"] and [phase[0] for phase in realshape] == ["alone"]
    assert paths == [["run", ["tests/pack", "-k", "x"], ["core", "comfyui", "realshape"], {}]]
    merged = json.loads(lines[4])
    assert merged["tiers"] == {"core": {"tests": 1}, "realshape": {"tests": 2}}
    assert merged["wall_s"] == 5.0 and [t["nodeid"] for t in merged["tests"]] == ["x", "y"]
    assert merged["args"] == ["a", ";", "b"]
