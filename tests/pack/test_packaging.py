"""Registry packaging: ``comfy node validate`` passes and ``comfy node pack`` ships the pack only.

comfy-cli zips the *git-tracked* files minus ``.comfyignore``. To test what the
next commit would publish (not whatever happens to be committed now), the
files git would take (tracked + untracked-but-not-ignored) are copied into a
scratch repository and packed there.

comfy-cli is a separate tool, not a dependency of the pack: set ``KREA2_COMFY_CLI``
to its executable or put ``comfy`` on PATH (``python3 dev.py test`` does so, see docs/development.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO_ROOT = Path(__file__).resolve().parents[2]

# What a user's custom_nodes/<pack> needs, and nothing else.
ALLOWED_TOP_LEVEL = {"__init__.py", "adapters", "nodes", "web", "example_workflows", "docs", "locales",
                     "pyproject.toml", "requirements.txt", "README.md", "CHANGELOG.md", "LICENSE"}
REQUIRED = {"__init__.py", "pyproject.toml", "requirements.txt", "README.md", "LICENSE", "nodes/__init__.py",
            "adapters/__init__.py", "example_workflows/krea2_turbo_cachedit.json",
            "example_workflows/krea2_raw_cachedit.json", "example_workflows/krea2_diffusers_cachedit.json",
            "web/docs/Krea2CacheDiT.md", "web/docs/Krea2CacheDiT/zh.md", "locales/zh/nodeDefs.json",
            "locales/zh/main.json", "locales/en/main.json", "CHANGELOG.md"}
FORBIDDEN_PARTS = {"tests", "devkit", "__pycache__", "node_modules", ".pytest_cache", ".git", ".ci", "tools"}
FORBIDDEN_SUFFIXES = {".safetensors", ".ckpt", ".pt", ".bin", ".gguf", ".pyc", ".zip"}


def comfy_cli() -> list[str]:
    explicit = os.environ.get("KREA2_COMFY_CLI")
    if explicit:
        return [explicit]
    found = shutil.which("comfy")
    if found is None:
        pytest.skip("comfy-cli not installed (pip install comfy-cli into any venv, then set KREA2_COMFY_CLI "
                    "to its `comfy` or put it on PATH)")
    return [found]


def run_comfy(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # --skip-prompt: never wait for the first-run tracking question; no network is needed.
    result = subprocess.run([*comfy_cli(), "--skip-prompt", *args], cwd=cwd, capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, NO_COLOR="1"))
    assert result.returncode == 0, f"comfy {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def staged_repo(tmp_path_factory) -> Path:
    """A scratch git repo holding exactly the files the next commit of this repo would hold."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO_ROOT, capture_output=True, check=True).stdout.decode()
    dest = tmp_path_factory.mktemp("pack") / "krea2_cachedit"
    for rel in filter(None, listed.split("\0")):
        source = REPO_ROOT / rel
        if source.is_file():  # skips files deleted but not yet staged
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    return dest


def test_pyproject_metadata():
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    project, comfy = data["project"], data["tool"]["comfy"]
    assert project["name"] == "comfyui-krea2-cachedit"
    assert project["version"].count(".") == 2
    assert (REPO_ROOT / project["license"]["file"]).is_file()
    missing = [field for field in ("PublisherId", "DisplayName", "Icon", "requires-comfyui") if not comfy.get(field)]
    assert not missing, f"[tool.comfy] lacks {missing}"
    assert comfy["requires-comfyui"].startswith(">=")
    # The registry shows the icon from an absolute URL; it names this repository's own icon file.
    icon = urlparse(comfy["Icon"])
    assert icon.scheme == "https" and icon.netloc, f"Icon must be an absolute https URL, not {comfy['Icon']!r}"
    assert any((REPO_ROOT / Path(*icon.path.split("/")[-i:])).is_file() for i in (1, 2, 3)), (
        f"Icon {comfy['Icon']} names no file of this repository")
    # ComfyUI-Manager installs requirements.txt; the registry reads pyproject: they must agree.
    requirements = [line.strip() for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
    assert sorted(requirements) == sorted(project["dependencies"])


def test_the_registry_description_names_every_supported_family():
    """The description the Comfy Registry and ComfyUI-Manager show says what the pack covers: every family."""
    from krea2_cachedit.adapters.families.registry import SUPPORTED

    description = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["description"]
    missing = sorted({family.model for family in SUPPORTED if family.model not in description})
    assert not missing, f"pyproject.toml's [project].description does not name {missing}: add them to it"


def test_comfy_node_validate(staged_repo):
    result = run_comfy(["node", "validate"], staged_repo)
    assert "Security warnings" not in result.stdout, result.stdout


def test_comfy_node_pack_holds_only_the_pack(staged_repo):
    run_comfy(["node", "pack"], staged_repo)
    with zipfile.ZipFile(staged_repo / "node.zip") as archive:
        names = [name for name in archive.namelist() if not name.endswith("/")]
    assert REQUIRED <= set(names), f"missing from the zip: {sorted(REQUIRED - set(names))}"
    unexpected = sorted({name.split("/")[0] for name in names} - ALLOWED_TOP_LEVEL)
    assert not unexpected, f"unexpected top-level entries in the zip: {unexpected}"
    bad = [name for name in names
           if FORBIDDEN_PARTS & set(Path(name).parts) or Path(name).suffix in FORBIDDEN_SUFFIXES]
    assert not bad, f"development files in the zip: {bad[:20]}"
