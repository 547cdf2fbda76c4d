"""Shared fixtures: the pack loaded as ComfyUI loads it, and the real ComfyUI server.

Test tiers (see README, "Development"):
- core: real torch + diffusers + cache-dit, no ComfyUI;
- comfyui: the real ComfyUI server on the CPU (skipped when no ComfyUI is found);
- browser: headless Chromium against that server (skipped without Chromium/Node).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))

from comfy_harness import ComfyServer, find_comfyui, load_pack  # noqa: E402

load_pack()

_TIERS_RAN: dict[str, int] = {"core": 0, "comfyui": 0, "browser": 0}
_TIERS_SKIPPED: dict[str, str] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "comfyui: needs the real ComfyUI server")
    config.addinivalue_line("markers", "browser: needs headless Chromium and the ComfyUI server")


def _tier(item) -> str:
    if item.get_closest_marker("browser"):
        return "browser"
    # A test is in the ComfyUI tier when it really uses ComfyUI (every server fixture needs comfy_root).
    if "comfy_root" in getattr(item, "fixturenames", ()):
        return "comfyui"
    return "core"


def pytest_runtest_logreport(report):
    if report.when == "call":
        _TIERS_RAN[report.tier] = _TIERS_RAN.get(report.tier, 0) + 1
    elif report.skipped and report.when == "setup":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _TIERS_SKIPPED.setdefault(report.tier, reason.replace("Skipped: ", ""))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().tier = _tier(item)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.section("test tiers")
    for tier in ("core", "comfyui", "browser"):
        ran = _TIERS_RAN.get(tier, 0)
        if ran:
            terminalreporter.write_line(f"TIER {tier}: RAN ({ran} tests)")
        else:
            why = _TIERS_SKIPPED.get(tier, "no tests selected")
            terminalreporter.write_line(f"TIER {tier}: SKIPPED ({why})")


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
    from krea2_cachedit.adapters.synthetic import Krea2Shape

    return Krea2Shape()


@pytest.fixture(scope="session")
def comfy_server(comfy_root, tmp_path_factory, tiny_shape):
    """One real ComfyUI server for the session, with a tiny generated Krea-2 installed."""
    from krea2_cachedit.adapters.synthetic import save_native_checkpoint

    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_base"))
    from comfy_models import make_tiny_wan

    save_native_checkpoint(base / "models" / "diffusion_models" / "krea2_tiny.safetensors", tiny_shape, seed=0)
    # A real non-Krea model, for the "unsupported model" checks (made before the server lists its files).
    make_tiny_wan(comfy_root, base / "models" / "diffusion_models" / "tiny_wan.safetensors")
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()
