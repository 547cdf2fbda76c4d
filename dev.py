#!/usr/bin/env python3
"""Two commands for a fresh clone (only Python needed):

    python3 dev.py demo    # sampling with and without Cache-DiT, cache stats and speedup
    python3 dev.py test    # the whole test suite (what CI runs)

``test`` runs every tier but realshape in two pytest workers side by side, then realshape alone
(docs/development.md, "Test tiers"); ``--tier NAME`` (repeated, or a comma list) runs only those tiers
and only their setup steps; other pytest arguments (paths, ``-k``) make one plain pytest run of them. Every run keeps its tests' tiers and durations in
``tests/artifacts/durations.json``; ``python3 dev.py tier-times`` prints them as docs/development.md's table.

With ComfyUI, both need a small trained Krea-2 proxy (devkit/krea2_proxy.py) and the Turbo proxy
distilled from it (devkit/krea2_turbo_proxy.py), cached in ~/.cache/krea2-cachedit: copied from their
pinned builds (../shared/proxies, docs/proxy.md), else built (about 13 minutes on 2 CPU cores, then
about 9 of one core more): ``test`` makes sure of both first; ``demo``, when they
are not built yet, shows the seeded-random model's table first and builds them after that. ``test`` also
makes sure of the small trained Flux (devkit/flux_proxy.py), the Flux regimes' model: taken from its
pinned build once there is one, else built (about 13 minutes of one core).

and the GPU check (docs/gpu-check.md): Krea-2 Turbo and Raw at full size on a GPU machine
without network, with and without the cache and torch.compile:

    python3 dev.py gpu-check --prepare   # here: put what that machine lacks into .gpu-check/
    python3 dev.py gpu-check             # there: install from .gpu-check/ offline and measure
    python3 dev.py gpu-check --smoke     # here: the same path on the CPU at a small size

demo and test set up their environment first. When a ComfyUI is found (``COMFYUI_PATH``,
the ComfyUI whose ``custom_nodes`` holds this pack, or ``~/comfy/ComfyUI``),
they use its virtual environment (creating it from ComfyUI's requirements when
it has none) and install this pack's requirements into it, as ComfyUI-Manager
would; ``test`` also installs ComfyUI-Manager as ComfyUI pins it
(``manager_requirements.txt``). Otherwise they use ``.venv`` in this folder with a CPU build of torch,
and the ComfyUI tests are skipped with a message saying so.

CI (``.ci/run``) sets ``KREA2_REQUIRE_TIERS``: then every listed test tier must
run and pass without a skip, and a missing ComfyUI stops the run at once.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import venv
from pathlib import Path

# A script in the repository root: devkit/ and benchmarks/ import as packages from here.
from devkit.comfy_harness import REQUIRE_TIERS_ENV, find_comfyui, required_tiers  # stdlib only

REPO = Path(__file__).resolve().parent

# matplotlib: the peer benchmark's plot (python -m benchmarks.peers); pytest-xdist: test workers side by side.
DEV_REQUIREMENTS = ["pytest>=8", "pytest-xdist>=3", "matplotlib"]
# Without ComfyUI: the small CPU build that pip finds on machines prepared for it, else PyPI's.
STANDALONE_TORCH = "torch==2.13.0"
DURATIONS_JSON = REPO / "tests" / "artifacts" / "durations.json"   # each test run's tiers and durations


def sh(*cmd, **kwargs):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def venv_python(folder: Path) -> Path:
    return folder / "bin" / "python"


def create_venv(folder: Path) -> Path:
    if not venv_python(folder).exists():
        print(f"Creating a virtual environment in {folder}", flush=True)
        venv.create(folder, with_pip=True)
    return venv_python(folder)


def pip_install(python: Path, *args):
    sh(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *args)


def prepare() -> tuple[Path, Path | None]:
    """The interpreter to run with, and the ComfyUI it will test against (or None)."""
    comfy_root = find_comfyui()
    if comfy_root is None and "comfyui" in required_tiers():
        where = (f"COMFYUI_PATH={os.environ['COMFYUI_PATH']} holds no ComfyUI (main.py and comfy/)"
                 if os.environ.get("COMFYUI_PATH") else
                 "COMFYUI_PATH is unset, ~/comfy/ComfyUI holds none and this pack is not in a custom_nodes folder")
        raise SystemExit(f"No ComfyUI found: {where}. {REQUIRE_TIERS_ENV}={','.join(required_tiers())} requires the "
                         f"comfyui tier, so this run stops here.")
    if comfy_root is not None:
        folder = next((comfy_root / d for d in (".venv", "venv") if (comfy_root / d / "bin" / "python").exists()),
                      comfy_root / ".venv")
        fresh = not venv_python(folder).exists()
        python = create_venv(folder)
        if fresh:
            pip_install(python, "-r", comfy_root / "requirements.txt")
        print(f"ComfyUI found at {comfy_root}; using {python}", flush=True)
    else:
        python = create_venv(REPO / ".venv")
        if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
            pip_install(python, STANDALONE_TORCH)
        print(f"No ComfyUI found: using {python}; ComfyUI-based steps will be skipped.", flush=True)
    pip_install(python, "-r", REPO / "requirements.txt", *DEV_REQUIREMENTS)
    return python, comfy_root


def consequence(tier: str) -> str:
    """What a failed setup step means for this run."""
    if tier in required_tiers():
        return f"{tier} tests will be skipped, and {REQUIRE_TIERS_ENV} makes that fail the run"
    return f"{tier} tests will be skipped"


def prepare_browser():
    """Chromium and playwright-core for the browser tier; the tests skip (and say why) if this fails."""
    result = subprocess.run(["bash", str(REPO / "tests" / "browser" / "setup.sh")])
    status = "ok" if result.returncode == 0 else f"FAILED ({consequence('browser')})"
    print(f"browser setup: {status}", flush=True)


def prepare_manager(python: Path, comfy_root: Path | None):
    """ComfyUI-Manager as ComfyUI pins it (``pip install -r manager_requirements.txt``), for the
    manager install test; without it (no PyPI) that test skips and says why."""
    pins = comfy_root / "manager_requirements.txt" if comfy_root else None
    if pins is None or not pins.is_file():
        return
    result = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", pins])
    print(f"ComfyUI-Manager setup: {'ok' if result.returncode == 0 else 'FAILED (the manager install test will be skipped)'}",
          flush=True)


def prepare_packaging_tools():
    """comfy-cli, for the packaging tests, in its own venv so it cannot disturb ComfyUI's."""
    python = create_venv(REPO / ".tools-venv")
    result = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "comfy-cli"])
    if result.returncode == 0:
        os.environ["KREA2_COMFY_CLI"] = str(python.parent / "comfy")
    status = "ok" if result.returncode == 0 else f"FAILED ({consequence('core')}: the packaging tests need it)"
    print(f"comfy-cli setup: {status}", flush=True)


# The proxy tier's models, built in this order, each with the build it is distilled from (the Turbo proxy
# from the trained proxy), if any.
PROXY_BUILDS = (("Krea-2 proxy", "devkit.krea2_proxy", None),
                ("Krea-2 Turbo proxy", "devkit.krea2_turbo_proxy", "Krea-2 proxy"),
                ("Flux proxy", "devkit.flux_proxy", None))


def prepare_proxy(python: Path, comfy_root: Path | None):
    """The proxy tier's models, each built once into a cache outside the repository (with a progress
    bar) and reused while its generator is unchanged: the small trained Krea-2 (the 52-step, CFG 3.5
    regime's), the Turbo proxy distilled from it (the 8-step, CFG 1 regime's), and the small trained
    Flux (the Flux regimes', 20 and 28 steps at CFG 3.5)."""
    if comfy_root is None:
        return
    failed = set()
    for name, module, teacher in PROXY_BUILDS:
        if teacher in failed:   # the distilled proxy's build would train its failed teacher again first
            print(f"{name} setup: not tried ({teacher} failed; {consequence('proxy')})", flush=True)
            failed.add(name)
            continue
        result = subprocess.run([python, "-m", module, "ensure", "--comfyui", comfy_root], cwd=REPO)
        if result.returncode:
            failed.add(name)
        status = "ok" if result.returncode == 0 else f"FAILED ({consequence('proxy')})"
        print(f"{name} setup: {status}", flush=True)


def chosen_tiers(args: list[str]) -> list[str]:
    """The tiers ``--tier NAME`` / ``--tier=NAME`` (repeated, or a comma list) picks among pytest's arguments."""
    values = [value for flag, value in zip(args, args[1:]) if flag == "--tier"]
    values += [arg.removeprefix("--tier=") for arg in args if arg.startswith("--tier=")]
    return list(dict.fromkeys(name.strip() for value in values for name in value.split(",") if name.strip()))


# The realshape tier runs after the others, on its own: its 3 GB real-size model wants the machine's memory
# and both cores (one block call is some tens of seconds of two-core matrix work).
ALONE_TIERS = ("realshape",)
WORKERS_ENV = "KREA2_TEST_WORKERS"


@dataclasses.dataclass
class Phase:
    """One pytest run of ``dev.py test``: its arguments, the tiers it must run, its environment."""
    name: str
    args: list[str]
    required: list[str]
    env: dict[str, str]

    durations: Path = DURATIONS_JSON   # where its pytest keeps its tests' tiers and durations


def without_tier_args(args: list[str]) -> list[str]:
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--tier":
            skip = True
        elif not arg.startswith("--tier="):
            kept.append(arg)
    return kept


def planned_phases(args: list[str], required: list[str], workers: int) -> list[Phase]:
    """The runs ``dev.py test [--tier NAME] ...`` makes: the tiers that share the machine first, in ``workers``
    pytest workers side by side (one thread each: test models are small, and threads of two workers would
    contend for the same two cores), then the tiers that need it alone. Other pytest arguments (paths, -k)
    ask for one plain run of what they name."""
    chosen = chosen_tiers(args)
    if without_tier_args(args):
        return [Phase("run", args, required, {})]
    together = [name for name in chosen if name not in ALONE_TIERS]
    alone = [name for name in chosen or ALONE_TIERS if name in ALONE_TIERS]
    phases = []
    if together or not chosen:
        tiers = ([f"--tier={','.join(together)}"] if together else []) + [f"--not-tier={','.join(ALONE_TIERS)}"]
        side_by_side = ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []
        phases.append(Phase("together", tiers + side_by_side, [t for t in required if t not in ALONE_TIERS],
                            {"OMP_NUM_THREADS": "1"} if workers > 1 else {}))
    if alone:
        phases.append(Phase("alone", [f"--tier={','.join(alone)}"], [t for t in required if t in ALONE_TIERS], {}))
    if len(phases) > 1:   # each keeps its own file; the run's is the two merged
        for phase in phases:
            phase.durations = DURATIONS_JSON.with_name(f"durations-{phase.name}.json")
    return phases


def merged_durations(records: list[dict]) -> dict:
    """One durations record of a run made in phases: each tier as the phase that ran it reported it."""
    tiers = {}
    for record in records:
        for name, tier in record["tiers"].items():
            if tier["tests"] or name not in tiers:
                tiers[name] = tier
    return {"args": [arg for i, record in enumerate(records) for arg in [*([";"] if i else []), *record["args"]]],
            "phases": [{"args": record["args"], "wall_s": record["wall_s"]} for record in records],
            "selected_tiers": [name for record in records for name in record["selected_tiers"]],
            "required_tiers": required_tiers(), "wall_s": round(sum(record["wall_s"] for record in records), 2),
            "tiers": tiers, "tests": [test for record in records for test in record["tests"]]}


def run_tests(python: Path, args: list[str]) -> int:
    workers = int(os.environ.get(WORKERS_ENV) or min(2, os.cpu_count() or 1))
    phases = planned_phases(args, required_tiers(), workers)
    failed = False
    for phase in phases:
        env = {**os.environ, **phase.env, REQUIRE_TIERS_ENV: ",".join(phase.required)}
        phase.durations.unlink(missing_ok=True)
        print(f"+ tests, {phase.name}: pytest {' '.join(phase.args)}", flush=True)
        result = subprocess.run([python, "-m", "pytest", "-ra", "--durations-json", phase.durations, *phase.args],
                                cwd=REPO, env=env)
        failed |= result.returncode != 0
    if len(phases) > 1:
        import json

        records = [json.loads(phase.durations.read_text()) for phase in phases if phase.durations.is_file()]
        record = merged_durations(records)
        DURATIONS_JSON.write_text(json.dumps(record, indent=1) + "\n")
        print(f"\nall phases ({record['wall_s'] / 60:.1f} min), kept in {DURATIONS_JSON}:")
        for name, tier in record["tiers"].items():
            counts = ", ".join(f"{tier[what]} {what}" for what in ("passed", "failed", "xfailed", "skipped") if tier[what])
            print(f"TIER {name}: {tier['verdict']} ({counts or 'no tests selected'}) in {tier['seconds']:.1f} s")
    return 1 if failed else 0


def tier_times(args: list[str]) -> int:
    """docs/development.md's table of tier times, in Markdown, from a run's durations file
    (``tests/artifacts/durations.json`` unless a path is given)."""
    import json

    path = Path(args[0]) if args else DURATIONS_JSON
    if not path.is_file():
        print(f"{path}: no such file; a test run writes it (python3 dev.py test)", file=sys.stderr)
        return 1
    record = json.loads(path.read_text())
    print(f"{path}: pytest {' '.join(record['args'])}".rstrip(), file=sys.stderr)   # which run the table shows
    print("| tier | tests | passed | skipped | failed | minutes |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, tier in record["tiers"].items():
        if tier["tests"]:
            print(f"| {name} | {tier['tests']} | {tier['passed'] + tier['xfailed']} | {tier['skipped']} | "
                  f"{tier['failed']} | {tier['seconds'] / 60:.1f} |")
    tests = sum(tier["tests"] for tier in record["tiers"].values())
    minutes = sum(tier["seconds"] for tier in record["tiers"].values()) / 60
    print(f"| all | {tests} | | | | {minutes:.1f} (wall {record['wall_s'] / 60:.1f}) |")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("demo", "test", "gpu-check", "tier-times"):
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "tier-times":
        return tier_times(rest)
    tiers = chosen_tiers(rest) if command == "test" else []
    if tiers and required_tiers():   # a tier left out by --tier is not required of this run
        os.environ[REQUIRE_TIERS_ENV] = ",".join(name for name in required_tiers() if name in tiers)
    if command == "gpu-check":  # sets up its own environments: the GPU machine's python3 runs it as is
        from benchmarks.gpu_check.setup import main as gpu_check

        return gpu_check(rest)
    python, comfy_root = prepare()
    if command == "demo":
        return subprocess.run([python, "-m", "benchmarks.speedup", *rest], cwd=REPO).returncode
    def wanted(tier: str) -> bool:   # a setup step runs only for a tier this run runs
        return not tiers or tier in tiers

    if wanted("comfyui"):
        prepare_manager(python, comfy_root)
    if wanted("browser"):
        prepare_browser()
    if wanted("core"):
        prepare_packaging_tools()
    if wanted("proxy"):
        prepare_proxy(python, comfy_root)
    return run_tests(python, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
