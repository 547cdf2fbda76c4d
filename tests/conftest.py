"""Shared fixtures (the pack loaded as ComfyUI loads it, the real ComfyUI server) and test tiers.

Test tiers (see docs/development.md, "Test tiers"), reported one line each at the end of a run:
- core: real torch + diffusers + cache-dit, no ComfyUI;
- comfyui: the real ComfyUI server on the CPU (skipped when no ComfyUI is found);
- browser: headless Chromium against that server (skipped without Chromium/Node);
- realshape: Krea-2 at its real width and heads (two blocks) through that server, and the pieces
  whose sizes matter on real-size residuals (``tests/test_realshape_*.py``);
- proxy: the small trained Krea-2 (devkit/krea2_proxy.py, the 52-step regime's) and the Turbo proxy
  distilled from it (devkit/krea2_turbo_proxy.py, the 8-step regime's) through that server: caching
  where it matters (threshold decisions, quality cost).
A test's tier is its ``tier`` marker (``pytest.mark.tier("browser")``), else "comfyui" when it
uses ComfyUI, else "core"; a new tier needs nothing but the marker.

``KREA2_REQUIRE_TIERS`` (CI sets it, see ``.ci/run``) lists tiers that must each have run and
passed without a skip: otherwise the run fails and says what was missing.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
DEVKIT_DIR = TESTS_DIR.parent / "devkit"   # the harness, prompts and models the benchmarks use too
# The tests are grouped by concern (dbcache/, forecast/, families/, ...), what they share in support/; a test may
# import another group's test module (a shared check), so every group is importable from every other.
GROUPS = sorted(d for d in TESTS_DIR.iterdir() if d.is_dir() and any(d.glob("test_*.py")))
sys.path[:0] = [str(TESTS_DIR / "support"), *map(str, GROUPS), str(DEVKIT_DIR)]

from browser_harness import BROWSER_DIR  # noqa: E402
from comfy_harness import REQUIRE_TIERS_ENV, ComfyServer, find_comfyui, load_pack, required_tiers  # noqa: E402

load_pack()

BASE_TIERS = ("core", "comfyui", "browser", "realshape", "proxy")


def pytest_configure(config):
    config.addinivalue_line("markers", "comfyui: needs the real ComfyUI server")
    config.addinivalue_line("markers", "tier(name): the test tier this test belongs to (reported per tier)")


def _tier(item) -> str:
    marker = item.get_closest_marker("tier")
    if marker:
        return marker.args[0]
    # A test is in the ComfyUI tier when it really uses ComfyUI (every server fixture needs comfy_root).
    if "comfy_root" in getattr(item, "fixturenames", ()):
        return "comfyui"
    return "core"


@dataclasses.dataclass
class TierResult:
    passed: int = 0
    failed: int = 0
    xfailed: int = 0
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # reason -> tests

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
        return f"TIER {name}: {self.verdict()} ({', '.join(counts) or 'no tests selected'})"

    def report(self, name: str) -> str:
        return "\n".join([self.summary(name), *(f"    skipped {n}: {why}" for why, n in self.skipped.items())])


_OUTCOMES: dict[str, tuple[str, str, str]] = {}   # test id -> (tier, outcome, skip reason)
_COLLECTION_SKIPS: list[str] = []                # modules skipped before their tests were collected


def _skip_reason(report) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_runtest_logreport(report):
    """One outcome per test: a failure in any phase wins, then a skip in any phase, then the call's pass."""
    tier, outcome, reason = _OUTCOMES.get(report.nodeid, (report.tier, "passed", ""))
    if report.failed:
        outcome = "failed"
    elif report.skipped and outcome != "failed":
        # A strict xfail is a known, documented failure; an XPASS of one is reported as failed.
        outcome, reason = ("xfailed", "") if hasattr(report, "wasxfail") else ("skipped", _skip_reason(report))
    _OUTCOMES[report.nodeid] = (tier, outcome, reason)


def pytest_collectreport(report):
    if report.skipped:
        _COLLECTION_SKIPS.append(f"{report.nodeid}: {_skip_reason(report)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().tier = _tier(item)


def tier_results() -> dict[str, TierResult]:
    results = {name: TierResult() for name in (*BASE_TIERS, *required_tiers())}
    for tier, outcome, reason in _OUTCOMES.values():
        result = results.setdefault(tier, TierResult())
        if outcome == "skipped":
            result.skipped[reason] += 1
        else:
            setattr(result, outcome, getattr(result, outcome) + 1)
    return results


def missing_required_tiers() -> list[str]:
    """Why a required tier does not count as passed, one line per tier (and per skipped module)."""
    results = tier_results()
    problems = [results[name].summary(name) + "".join(f"; skipped: {why}" for why in results[name].skipped)
                for name in required_tiers() if results[name].verdict() != "PASSED"]
    if required_tiers():
        problems += [f"module skipped at collection: {skip}" for skip in _COLLECTION_SKIPS]
    return problems


def pytest_sessionfinish(session, exitstatus):
    if missing_required_tiers() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    terminalreporter.section("test tiers")
    for name, result in tier_results().items():
        terminalreporter.write_line(result.report(name))
    for skip in _COLLECTION_SKIPS:
        terminalreporter.write_line(f"module skipped at collection: {skip}")


def pytest_unconfigure(config):
    """The verdict on required tiers, last: below pytest's own summary, where a CI log is read."""
    problems = missing_required_tiers()
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
    from krea2_synthetic import Krea2Shape

    return Krea2Shape()


@pytest.fixture(scope="session")
def comfy_server(comfy_root, tmp_path_factory, tiny_shape):
    """One real ComfyUI server for the session, with a tiny generated Krea-2 installed."""
    from krea2_synthetic import save_native_checkpoint

    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_base"))
    from comfy_models import make_tiny_wan

    save_native_checkpoint(base / "models" / "diffusion_models" / "krea2_tiny.safetensors", tiny_shape, seed=0)
    # A real non-Krea model, for the "unsupported model" checks (made before the server lists its files).
    make_tiny_wan(comfy_root, base / "models" / "diffusion_models" / "tiny_wan.safetensors")
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


def family_checkpoint_seed(model_key: str) -> int:
    """The seed of a family checkpoint: its place in ``FAMILY_MODELS``, whichever fixture writes it."""
    from comfy_models import FAMILY_MODELS

    return list(FAMILY_MODELS).index(model_key)


def on_demand_models() -> dict[str, str]:
    """{FAMILY_MODELS key: file} of the families with tests of their own (``FamilySpec.own_tests``):
    their checkpoints are written only when one of those tests asks for them."""
    from comfy_models import FAMILY_MODELS
    from family_prompts import FAMILIES

    own = {spec.model for spec in FAMILIES.values() if spec.own_tests}
    return {key: name for key, name in FAMILY_MODELS.items() if name in own}


@pytest.fixture(scope="session")
def family_server(comfy_root, tmp_path_factory):
    """A real ComfyUI server with tiny seeded-random Wan (two, and a VACE), Z-Image, Qwen-Image and Flux
    checkpoints.

    Made once per session: Z-Image's checkpoint is 2.1 GB, Qwen-Image's 1.4 GB (ComfyUI detects them
    only at full width). Chroma's is added by ``chroma_server``, when a Chroma test runs.
    """
    from comfy_models import FAMILY_MODELS, make_family_checkpoint

    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_families"))
    for family, name in FAMILY_MODELS.items():
        if family not in on_demand_models():
            make_family_checkpoint(comfy_root, family.removesuffix("_low"), base / "models" / "diffusion_models" / name,
                                   seed=family_checkpoint_seed(family))
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chroma_server(comfy_root, family_server):
    """``family_server`` with the shallow Chroma checkpoint (1.9 GB in bf16), written once per session, the
    first time a test asks for it (ComfyUI lists a model folder again when it changes)."""
    from comfy_models import FAMILY_MODELS, make_family_checkpoint

    path = family_server.base_dir / "models" / "diffusion_models" / FAMILY_MODELS["chroma"]
    make_family_checkpoint(comfy_root, "chroma", path, seed=family_checkpoint_seed("chroma"))
    return family_server


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
    from family_prompts import family_prompt
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
    from krea2_proxy import ensure_proxy

    return ensure_proxy(comfy_root)


@pytest.fixture(scope="session")
def turbo_proxy(comfy_root, proxy):
    """The proxy distilled to 8 steps at CFG 1 (devkit/krea2_turbo_proxy.py): the few-step regime's model;
    it decodes with the proxy's codec (distilled after the proxy when the cache has none)."""
    from krea2_turbo_proxy import ensure_turbo_proxy

    return ensure_turbo_proxy(comfy_root)


@pytest.fixture(scope="session")
def proxy_server(comfy_root, tmp_path_factory, proxy, turbo_proxy):
    """A real ComfyUI server with the proxy, the Turbo proxy and seeded-random weights of their shape installed."""
    from krea2_prompts import PROXY_MODEL, PROXY_RANDOM_MODEL, TURBO_PROXY_MODEL
    from krea2_synthetic import Krea2Shape, save_native_checkpoint

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
    from krea2_prompts import TINY_MODEL
    from krea2_synthetic import save_native_checkpoint

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
    from comfy_models import FAMILY_MODELS, make_family_checkpoint

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
    from comfy_models import FAMILY_MODELS, make_minimax_h3_checkpoint

    path = family_server.base_dir / "models" / "diffusion_models" / FAMILY_MODELS["minimax_h3"]
    if not path.exists():
        make_minimax_h3_checkpoint(comfy_root, path, seed=family_checkpoint_seed("minimax_h3"))
    return family_server


@pytest.fixture(scope="session")
def minimax_h3_server(minimax_server):
    """``minimax_server`` under the family's key in ``FAMILIES`` (the example tests ask for ``<key>_server``)."""
    return minimax_server
