"""Shared fixtures (the pack loaded as ComfyUI loads it, the real ComfyUI server) and test tiers.

Test tiers (see docs/development.md, "Test tiers"), reported one line each at the end of a run:
- core: real torch + diffusers + cache-dit, no ComfyUI;
- comfyui: the real ComfyUI server on the CPU (skipped when no ComfyUI is found);
- browser: headless Chromium against that server (skipped without Chromium/Node);
- realshape: Krea-2 at its real width and heads (two blocks) through that server, and the pieces
  whose sizes matter on real-size residuals (``tests/realshape/``);
- proxy: the small trained Krea-2 (devkit/krea2_proxy.py, the 52-step regime's) and the Turbo proxy
  distilled from it (devkit/krea2_turbo_proxy.py, the 8-step regime's) through that server: caching
  where it matters (threshold decisions, quality cost).
A test's tier is its ``tier`` marker (``pytest.mark.tier("browser")``), else "comfyui" when it is
marked ``comfyui`` or needs ``comfy_root`` (every server fixture does), else "core"; a new tier needs
nothing but the marker. A test labelled core that resolves ComfyUI all the same (a server taken by
name, ``request.getfixturevalue``) fails, naming itself. ``--tier NAME`` (repeated, or a comma list)
runs only those tiers, ``--not-tier NAME`` all but those. Each run ends with its tests per tier, their seconds and the slowest tests, and
keeps each test's tier, outcome and seconds in ``tests/artifacts/durations.json`` (``--durations-json``).

``KREA2_REQUIRE_TIERS`` (CI sets it, see ``.ci/run``) lists tiers that must each have run and
passed without a skip: otherwise the run fails and says what was missing.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
# The tests are grouped by concern (dbcache/, forecast/, families/, ...), what they share in support/: the
# repository and support/ are import roots (pyproject's pythonpath); no test module imports another.
from browser_harness import BROWSER_DIR  # noqa: E402
from devkit.comfy_harness import REQUIRE_TIERS_ENV, ComfyServer, find_comfyui, load_pack, required_tiers  # noqa: E402

load_pack()

BASE_TIERS = ("core", "comfyui", "browser", "realshape", "proxy")
DURATIONS_JSON = TESTS_DIR / "artifacts" / "durations.json"   # tests/artifacts/ is not committed
_STARTED = pytest.StashKey[float]()


def pytest_addoption(parser):
    parser.addoption("--tier", action="append", default=[], metavar="NAME",
                     help="run only the tests of this tier (repeat it or give a comma list): " + ", ".join(BASE_TIERS))
    parser.addoption("--not-tier", action="append", default=[], metavar="NAME",
                     help="leave this tier's tests out (repeat it or give a comma list)")
    parser.addoption("--durations-json", default=str(DURATIONS_JSON), metavar="PATH",
                     help="where the run keeps each test's tier, outcome and duration (default: %(default)s)")


def pytest_configure(config):
    config.addinivalue_line("markers", "comfyui: needs the real ComfyUI server (puts the test in the comfyui tier)")
    config.addinivalue_line("markers", "tier(name): the test tier this test belongs to (reported per tier)")


def _names(config, option: str) -> list[str]:
    return list(dict.fromkeys(name.strip() for value in config.getoption(option) for name in value.split(",")
                              if name.strip()))


def selected_tiers(config) -> list[str]:
    """The tiers ``--tier`` asks for, in order; empty when it is not given (every tier runs)."""
    return _names(config, "tier")


def left_out_tiers(config) -> list[str]:
    """The tiers ``--not-tier`` leaves out (``dev.py test`` runs realshape apart from the others)."""
    return _names(config, "not_tier")


def _tier(item) -> str:
    marker = item.get_closest_marker("tier")
    if marker:
        return marker.args[0]
    # Every server fixture needs comfy_root, so a test that names one is seen here; a test that takes its
    # server by name (request.getfixturevalue) cannot be seen before it runs, so its module is marked comfyui.
    # _check_tier holds both rules to what the test really resolved.
    if item.get_closest_marker("comfyui") or "comfy_root" in getattr(item, "fixturenames", ()):
        return "comfyui"
    return "core"


def _resolved_comfyui(item) -> bool:
    """Whether the test resolved ComfyUI: its request's names hold every fixture set up for it, by argument,
    through another fixture or by name, ``request.getfixturevalue`` in the test or in a fixture."""
    request = getattr(item, "_request", None)
    return request is not None and "comfy_root" in request.fixturenames


def _check_tier(item, report):
    """A test labelled core that resolved ComfyUI fails: the label would hide it from ``--tier comfyui`` and
    count a server test as core."""
    if report.when == "call" and report.tier == "core" and _resolved_comfyui(item) and not report.failed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} is in the core tier but resolved ComfyUI (comfy_root): mark it "
                           f"pytest.mark.comfyui (or its module: pytestmark = pytest.mark.comfyui)")


def pytest_collection_modifyitems(config, items):
    wanted, left_out = selected_tiers(config), left_out_tiers(config)
    if not (wanted or left_out):
        return
    known = {*BASE_TIERS, *(_tier(item) for item in items)}
    for option, names in (("--tier", wanted), ("--not-tier", left_out)):
        if unknown := [name for name in names if name not in known]:
            raise pytest.UsageError(f"{option} {','.join(unknown)}: no such tier (tiers: {', '.join(sorted(known))})")
    kept, deselected = [], []
    for item in items:
        tier = _tier(item)
        (kept if (not wanted or tier in wanted) and tier not in left_out else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_collection_finish(session):
    _COLLECTED.clear()
    _COLLECTED.update(collections.Counter(_tier(item) for item in session.items))


@dataclasses.dataclass
class TierResult:
    passed: int = 0
    failed: int = 0
    xfailed: int = 0
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # reason -> tests
    seconds: float = 0.0   # setup, call and teardown of its tests (a shared server's start in its first test)

    def verdict(self) -> str:
        if self.failed:
            return "FAILED"
        if not (self.passed or self.xfailed):
            return "SKIPPED" if self.skipped else "NOT RUN"
        return "INCOMPLETE" if self.skipped else "PASSED"

    def summary(self, name: str) -> str:
        counts = [f"{n} {what}" for n, what in ((self.passed, "passed"), (self.failed, "failed"),
                                                 (self.xfailed, "xfailed"), (sum(self.skipped.values()), "skipped"))
                  if n]
        took = f" in {self.seconds:.1f} s" if counts else ""
        return f"TIER {name}: {self.verdict()} ({', '.join(counts) or 'no tests selected'}){took}"

    def report(self, name: str) -> str:
        return "\n".join([self.summary(name), *(f"    skipped {n}: {why}" for why, n in self.skipped.items())])


@dataclasses.dataclass
class OneTest:
    tier: str
    outcome: str = "passed"
    reason: str = ""          # why it was skipped
    seconds: float = 0.0      # its setup, call and teardown


_OUTCOMES: dict[str, OneTest] = {}    # test id -> its tier, outcome and duration
_COLLECTED: collections.Counter = collections.Counter()   # tier -> tests selected to run
_COLLECTION_SKIPS: list[str] = []         # modules skipped before their tests were collected
SLOWEST = 15   # the slowest tests listed at the end of a run


def _skip_reason(report) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_runtest_logreport(report):
    """One outcome per test: a failure in any phase wins, then a skip in any phase, then the call's pass."""
    result = _OUTCOMES.setdefault(report.nodeid, OneTest(report.tier))
    result.seconds += report.duration
    if report.failed:
        result.outcome = "failed"
    elif report.skipped and result.outcome != "failed":
        # A strict xfail is a known, documented failure; an XPASS of one is reported as failed.
        result.outcome, result.reason = ("xfailed", "") if hasattr(report, "wasxfail") else ("skipped", _skip_reason(report))


def pytest_collectreport(report):
    if report.skipped:
        _COLLECTION_SKIPS.append(f"{report.nodeid}: {_skip_reason(report)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.tier = _tier(item)
    _check_tier(item, report)


def reported_tiers(config=None) -> list[str]:
    """The tiers a run reports: the selected ones under ``--tier``, else every base tier; and the required ones."""
    chosen = selected_tiers(config) if config is not None else []
    left_out = left_out_tiers(config) if config is not None else []
    return list(dict.fromkeys([*(name for name in chosen or BASE_TIERS if name not in left_out), *required_tiers()]))


def tier_results(config=None) -> dict[str, TierResult]:
    results = {name: TierResult() for name in reported_tiers(config)}
    for test in _OUTCOMES.values():
        result = results.setdefault(test.tier, TierResult())
        result.seconds += test.seconds
        if test.outcome == "skipped":
            result.skipped[test.reason] += 1
        else:
            setattr(result, test.outcome, getattr(result, test.outcome) + 1)
    return results


def missing_required_tiers(config=None) -> list[str]:
    """Why a required tier does not count as passed, one line per tier (and per skipped module)."""
    results = tier_results(config)
    problems = [results[name].summary(name) + "".join(f"; skipped: {why}" for why in results[name].skipped)
                for name in required_tiers() if results[name].verdict() != "PASSED"]
    if required_tiers():
        problems += [f"module skipped at collection: {skip}" for skip in _COLLECTION_SKIPS]
    return problems


def pytest_sessionstart(session):
    session.config.stash[_STARTED] = time.time()


def is_worker(config) -> bool:
    """An xdist worker: it runs some of the tests and sends their reports to the controller, which keeps the
    record, the tier verdicts and the summary of the whole run."""
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session, exitstatus):
    if is_worker(session.config):
        return
    if missing_required_tiers(session.config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _OUTCOMES:
        write_durations(session.config, Path(session.config.getoption("durations_json")))


def write_durations(config, path: Path):
    """Each test's tier, outcome and seconds, and each tier's totals, for reading after the run
    (``python3 dev.py tier-times`` makes docs/development.md's table of them)."""
    wall = time.time() - config.stash[_STARTED]
    record = {
        "args": list(config.invocation_params.args),
        "selected_tiers": selected_tiers(config),
        "required_tiers": required_tiers(),
        "wall_s": round(wall, 2),
        "tiers": {name: {"tests": result.passed + result.failed + result.xfailed + sum(result.skipped.values()),
                         "passed": result.passed, "failed": result.failed, "xfailed": result.xfailed,
                         "skipped": sum(result.skipped.values()), "seconds": round(result.seconds, 2),
                         "verdict": result.verdict()}
                  for name, result in tier_results(config).items()},
        "tests": [{"nodeid": nodeid, "tier": test.tier, "outcome": test.outcome, "seconds": round(test.seconds, 3)}
                  for nodeid, test in _OUTCOMES.items()],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter, config):
    terminalreporter.section("test tiers")
    deselected = len(terminalreporter.stats.get("deselected", ()))
    # Under xdist the workers collect: the controller counts the tests it got reports for.
    collected = _COLLECTED or collections.Counter(test.tier for test in _OUTCOMES.values())
    terminalreporter.write_line("selected per tier: " + (", ".join(f"{name} {n}" for name, n in collected.items())
                                                         or "none") + (f" ({deselected} deselected)" if deselected else ""))
    if config.option.collectonly:
        return
    for name, result in tier_results(config).items():
        terminalreporter.write_line(result.report(name))
    for skip in _COLLECTION_SKIPS:
        terminalreporter.write_line(f"module skipped at collection: {skip}")
    if _OUTCOMES:
        started = config.stash.get(_STARTED, None)
        wall = f" (wall {time.time() - started:.1f} s)" if started else ""
        terminalreporter.write_line(f"tests took {sum(test.seconds for test in _OUTCOMES.values()):.1f} s{wall}; "
                                    f"kept in {config.getoption('durations_json')}")
        terminalreporter.write_line(f"slowest {min(SLOWEST, len(_OUTCOMES))}:")
        for nodeid, test in sorted(_OUTCOMES.items(), key=lambda kv: -kv[1].seconds)[:SLOWEST]:
            terminalreporter.write_line(f"  {test.seconds:8.2f} s  {test.tier:<10} {nodeid}")


def pytest_unconfigure(config):
    """The verdict on required tiers, last: below pytest's own summary, where a CI log is read."""
    if is_worker(config):
        return
    problems = missing_required_tiers(config)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not problems or reporter is None:
        return
    reporter.write_line(f"{REQUIRE_TIERS_ENV}={','.join(required_tiers())}: CI requires every listed tier to run "
                        f"and pass without a skip. Not met:", red=True, bold=True)
    for problem in problems:
        reporter.write_line(f"  {problem}", red=True)


# --- ComfyUI -------------------------------------------------------------------------

@pytest.fixture(scope="session")
def comfy_root() -> Path:
    root = find_comfyui()
    if root is None:
        pytest.skip("no ComfyUI found (set COMFYUI_PATH, install the pack in a ComfyUI's "
                    "custom_nodes, or put ComfyUI at ~/comfy/ComfyUI)")
    return root


@pytest.fixture(scope="session")
def tiny_shape():
    from devkit.krea2_synthetic import Krea2Shape

    return Krea2Shape()


@pytest.fixture(scope="session")
def comfy_server(comfy_root, tmp_path_factory, tiny_shape):
    """One real ComfyUI server for the session, with a tiny generated Krea-2 installed."""
    from devkit.krea2_synthetic import save_native_checkpoint

    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_base"))
    from devkit.comfy_models import make_tiny_wan

    save_native_checkpoint(base / "models" / "diffusion_models" / "krea2_tiny.safetensors", tiny_shape, seed=0)
    # A real non-Krea model, for the "unsupported model" checks (made before the server lists its files).
    make_tiny_wan(comfy_root, base / "models" / "diffusion_models" / "tiny_wan.safetensors")
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


def family_checkpoint_seed(model_key: str) -> int:
    """The seed of a family checkpoint: its place in ``FAMILY_MODELS``, whichever fixture writes it."""
    from devkit.comfy_models import FAMILY_MODELS

    return list(FAMILY_MODELS).index(model_key)


def on_demand_models() -> dict[str, str]:
    """{FAMILY_MODELS key: file} of the families served by a fixture of their own (``FamilySpec.on_demand``):
    their checkpoints are written only when a test asks for that fixture."""
    from devkit.comfy_models import FAMILY_MODELS
    from devkit.family_prompts import FAMILIES

    own = {spec.model for spec in FAMILIES.values() if spec.on_demand}
    return {key: name for key, name in FAMILY_MODELS.items() if name in own}


@pytest.fixture(scope="session")
def family_server(comfy_root, tmp_path_factory):
    """A real ComfyUI server with tiny seeded-random Wan (two, and a VACE), Z-Image, Qwen-Image, Flux and Chroma
    checkpoints (Z-Image, Qwen-Image and Chroma narrow, loaded at their size by the test node pack's loader)."""
    from devkit.comfy_models import FAMILY_MODELS, make_family_checkpoint

    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_families"))
    for family, name in FAMILY_MODELS.items():
        if family not in on_demand_models():
            make_family_checkpoint(comfy_root, family.removesuffix("_low"), base / "models" / "diffusion_models" / name,
                                   seed=family_checkpoint_seed(family))
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


def graph_key(prompt: dict) -> str:
    """A prompt as a key, without what changes no tensor (the conditioning's nonce, the file name prefix)."""
    return json.dumps({node_id: {**node, "inputs": {name: value for name, value in node["inputs"].items()
                                                     if name not in ("nonce", "filename_prefix")}}
                       for node_id, node in prompt.items()}, sort_keys=True)


@pytest.fixture(scope="session")
def uncached_latent():
    """``uncached_latent(server, family, **prompt_args)``: the latent of ``family_prompt(family,
    **prompt_args)`` without the cache node, sampled once per server and graph, so that tests comparing
    with the same uncached graph share its run (Krea-2's at CFG 3.5, seed 0: the node tests' baseline
    and the family tests' reference for caching off)."""
    from devkit.family_prompts import family_prompt
    from helpers import run_ok

    latents = {}

    def latent(server: ComfyServer, family: str, **prompt_args):
        prompt = family_prompt(family, prefix=f"{family}_uncached", **prompt_args)
        key = (server, graph_key(prompt))
        if key not in latents:
            latents[key] = server.saved_latent(run_ok(server, prompt), "7")
        return latents[key]

    return latent


@pytest.fixture(scope="session")
def proxy(comfy_root):
    """The small trained Krea-2 (built into its cache first when the cache has none)."""
    from devkit.krea2_proxy import ensure_proxy

    return ensure_proxy(comfy_root)


@pytest.fixture(scope="session")
def turbo_proxy(comfy_root, proxy):
    """The proxy distilled to 8 steps at CFG 1 (devkit/krea2_turbo_proxy.py): the few-step regime's model;
    it decodes with the proxy's codec (distilled after the proxy when the cache has none)."""
    from devkit.krea2_turbo_proxy import ensure_turbo_proxy

    return ensure_turbo_proxy(comfy_root)


@pytest.fixture(scope="session")
def flux_proxy(comfy_root):
    """The small trained Flux (devkit/flux_proxy.py; built into its cache first when the cache has none)."""
    from devkit.flux_proxy import ensure_flux_proxy

    return ensure_flux_proxy(comfy_root)


@pytest.fixture(scope="session")
def proxy_server(comfy_root, tmp_path_factory, proxy, turbo_proxy):
    """A real ComfyUI server with the proxy, the Turbo proxy and seeded-random weights of their shape installed."""
    from devkit.krea2_prompts import PROXY_MODEL, PROXY_RANDOM_MODEL, TURBO_PROXY_MODEL
    from devkit.krea2_synthetic import Krea2Shape, save_native_checkpoint

    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_proxy_base"))
    models = base / "models" / "diffusion_models"
    (models / PROXY_MODEL).symlink_to(proxy.checkpoint)
    (models / TURBO_PROXY_MODEL).symlink_to(turbo_proxy.checkpoint)
    save_native_checkpoint(models / PROXY_RANDOM_MODEL, Krea2Shape(**proxy.settings.shape_kwargs()), seed=0)
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


# --- the graph editor (browser tier) ---------------------------------------------------

@pytest.fixture(scope="module")
def browser_tools() -> tuple[str, str]:
    """Node and Chromium paths, or a skip (before any server starts) that says how to get them."""
    chromium = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
    node = shutil.which("node")
    missing = []
    if not Path(chromium).exists():
        missing.append("chromium (apt-get install chromium)")
    if node is None:
        missing.append("node")
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        missing.append("playwright-core (npm ci in tests/browser)")
    if missing:
        pytest.skip(f"browser test needs {', '.join(missing)}; run tests/browser/setup.sh")
    return node, chromium


@pytest.fixture(scope="module")
def editor_server(browser_tools, request, comfy_root, tmp_path_factory, tiny_shape):
    """The session's ComfyUI, or one serving the frontend in KREA2_FRONTEND_ROOT."""
    frontend = os.environ.get("KREA2_FRONTEND_ROOT")
    if not frontend:
        yield request.getfixturevalue("comfy_server")
        return
    from devkit.krea2_prompts import TINY_MODEL
    from devkit.krea2_synthetic import save_native_checkpoint

    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_frontend"))
    save_native_checkpoint(base / "models" / "diffusion_models" / TINY_MODEL, tiny_shape, seed=0)
    server = ComfyServer(comfy_root, base, extra_args=["--front-end-root", frontend]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def transformer():
    """A small seeded diffusers Krea-2 for the adapter tests that drive a ``CacheRun`` (``cache_runs``)."""
    from cache_runs import seeded_transformer

    return seeded_transformer()


def with_family_checkpoint(comfy_root: Path, server: ComfyServer, family: str) -> ComfyServer:
    """``server`` with the tiny checkpoint of ``family`` (a ``FAMILY_MODELS`` key), written unless it is there."""
    from devkit.comfy_models import FAMILY_MODELS, make_family_checkpoint

    path = server.base_dir / "models" / "diffusion_models" / FAMILY_MODELS[family]
    if not path.exists():
        make_family_checkpoint(comfy_root, family, path, seed=family_checkpoint_seed(family))
    return server


@pytest.fixture(scope="session")
def ltxv_server(comfy_root, family_server):
    """``family_server`` with the tiny LTXV checkpoint, written the first time a test asks for it."""
    return with_family_checkpoint(comfy_root, family_server, "ltxv")


@pytest.fixture(scope="session")
def hunyuan_video15_server(comfy_root, family_server):
    """``family_server`` with the tiny HunyuanVideo 1.5 checkpoint, written the first time a test asks for it."""
    return with_family_checkpoint(comfy_root, family_server, "hunyuan_video15")


@pytest.fixture(scope="session")
def hunyuan_image21_server(comfy_root, family_server):
    """``family_server`` with the tiny HunyuanImage 2.1 checkpoint, written the first time a test asks for it."""
    return with_family_checkpoint(comfy_root, family_server, "hunyuan_image21")


@pytest.fixture(scope="session")
def ltx2_server(comfy_root, family_server):
    """``family_server`` with the tiny LTX-2 checkpoint, written the first time a test asks for it."""
    return with_family_checkpoint(comfy_root, family_server, "ltx2")


@pytest.fixture(scope="session")
def minimax_server(comfy_root, family_server):
    """``family_server`` with the tiny MiniMax H3 checkpoint, written the first time a MiniMax H3 test asks."""
    from devkit.comfy_models import FAMILY_MODELS, make_minimax_h3_checkpoint

    path = family_server.base_dir / "models" / "diffusion_models" / FAMILY_MODELS["minimax_h3"]
    if not path.exists():
        make_minimax_h3_checkpoint(comfy_root, path, seed=family_checkpoint_seed("minimax_h3"))
    return family_server


@pytest.fixture(scope="session")
def ernie_image_server(comfy_root, family_server):
    """``family_server`` with the tiny ERNIE-Image checkpoint (its size in its metadata, for the test loader), written
    the first time a test asks for it."""
    from devkit.comfy_models import FAMILY_MODELS, make_ernie_image_checkpoint

    path = family_server.base_dir / "models" / "diffusion_models" / FAMILY_MODELS["ernie_image"]
    if not path.exists():
        make_ernie_image_checkpoint(comfy_root, path, seed=family_checkpoint_seed("ernie_image"))
    return family_server


@pytest.fixture(scope="session")
def minimax_h3_server(minimax_server):
    """``minimax_server`` under the family's key in ``FAMILIES`` (the example tests ask for ``<key>_server``)."""
    return minimax_server
