"""What the browser tests share: where the editor drivers and their outputs live, and a quiet editor.

The fixtures they share (``browser_tools``, ``editor_server``) are in conftest.py.
"""

from __future__ import annotations

from pathlib import Path

BROWSER_DIR = Path(__file__).resolve().parents[1] / "browser"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def quiet_first_run(server):
    """A fresh user would get the template browser over the canvas; a returning one would not."""
    for setting, value in {"Comfy.TutorialCompleted": True}.items():
        server.post(f"/settings/{setting}", value)
