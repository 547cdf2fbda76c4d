"""ComfyUI-Manager installs this pack from its git URL, and ComfyUI runs it (README, "Install").

With the real ComfyUI-Manager, the version ComfyUI pins in manager_requirements.txt:

1. this repository's committed HEAD is served over git:// on 127.0.0.1 (``git daemon``);
2. ``cm-cli install git://127.0.0.1:PORT/comfyui-krea2-cachedit.git`` clones it into
   custom_nodes and pip-installs requirements.txt line by line;
3. ComfyUI started with ``--enable-manager`` lists both nodes from the installed folder, runs
   the pack's Turbo template (with the small stand-ins of tests/support/example_stand_ins.py), and the
   manager reports no import failure for the pack. A second, deliberately broken pack shows that
   the same report does name a pack that fails to import.

Nothing goes into ComfyUI's own custom_nodes. cm-cli takes its target from ComfyUI's
folder_paths, and ``--user-directory DIR`` loads DIR/extra_model_paths.yaml, which here makes a
private custom_nodes the default. DIR is the manager folder the server uses with
``--base-directory BASE`` (BASE/user/__manager), so the CLI and the server share one manager
config, ``network_mode = offline``: neither reaches for the internet (they read the node lists
bundled with the package), and pip has nothing to download when the requirements are met.

The pack is the committed HEAD: commit a change before this test can see it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from devkit.comfy_harness import ComfyServer, comfyui_python, free_port, stop_process
from example_stand_ins import TINY_VAES, example_prompt, run_example, write_tiny_vae
from devkit.krea2_prompts import TINY_MODEL

pytestmark = pytest.mark.comfyui

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO_NAME = "comfyui-krea2-cachedit"  # the folder cm-cli clones into: the URL's last part
BROKEN_NAME = "krea2-import-fails"
NODES = ("Krea2CacheDiT", "CacheDiTDBCache", "Krea2DiffusersLoader")
TURBO = "krea2_turbo_cachedit.json"
MANAGER_CONFIG = "[default]\nnetwork_mode = offline\n"
PROGRESS = re.compile(r"\d+%\||it/s\]")  # tqdm bars of the clone


def git(*args, cwd: Path = REPO_ROOT) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"git {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
    return result.stdout.strip()


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def cm_cli_output(result: subprocess.CompletedProcess) -> str:
    """cm-cli's stdout and stderr as one line of words, without git's clone progress bars."""
    pieces = re.split(r"[\r\n]+", result.stdout + result.stderr)
    return " ".join(" ".join(piece for piece in pieces if not PROGRESS.search(piece)).split())


def requirement_lines() -> list[str]:
    lines = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


# --- ComfyUI-Manager as ComfyUI pins it ---------------------------------------------

def pinned_manager(comfy_root: Path) -> str:
    """``comfyui_manager==X`` from ComfyUI's manager_requirements.txt (skips for a ComfyUI without one)."""
    pins = comfy_root / "manager_requirements.txt"
    cli_args = (comfy_root / "comfy" / "cli_args.py").read_text()
    if not pins.is_file() or "--enable-manager" not in cli_args:
        pytest.skip(f"this ComfyUI ({comfy_root}) has no manager_requirements.txt / --enable-manager: "
                    "ComfyUI-Manager as a pip package needs a newer ComfyUI")
    for line in pins.read_text().splitlines():
        if line.strip().lower().replace("-", "_").startswith("comfyui_manager=="):
            return line.strip()
    pytest.fail(f"{pins} names no comfyui_manager==VERSION: {pins.read_text()!r}")


@pytest.fixture(scope="module")
def manager_version(comfy_root) -> str:
    """The installed ComfyUI-Manager version, when it is the one ComfyUI pins."""
    pin = pinned_manager(comfy_root)
    wanted = pin.split("==", 1)[1]
    python = comfyui_python(comfy_root)
    found = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('comfyui_manager'))"],
                           capture_output=True, text=True).stdout.strip()
    if found != wanted or not (Path(python).parent / "cm-cli").exists():
        have = f"version {found} is installed" if found else "it is not installed"
        pytest.skip(f"ComfyUI-Manager: ComfyUI asks for {pin} and {have} in ComfyUI's Python ({python}). "
                    f"`python3 dev.py test` installs it (needs PyPI), or run: "
                    f"{python} -m pip install -r {comfy_root / 'manager_requirements.txt'}")
    return wanted


# --- the git URL: git daemon on 127.0.0.1 ---------------------------------------------

class GitDaemon:
    """``git daemon`` serving every bare repository under ``repos`` on 127.0.0.1."""

    def __init__(self, repos: Path):
        self.repos = repos
        self.port = free_port()
        self.log_path = repos.parent / "git-daemon.log"
        self.process: subprocess.Popen | None = None

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}.git"

    def start(self, probe: str) -> "GitDaemon":
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                ["git", "daemon", f"--base-path={self.repos}", "--export-all", "--reuseaddr",
                 "--listen=127.0.0.1", f"--port={self.port}", str(self.repos)], stdout=log, stderr=log)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"git daemon exited: {self.log_path.read_text()}")
            probe_run = subprocess.run(["git", "ls-remote", self.url(probe)], capture_output=True, timeout=20)
            if probe_run.returncode == 0:
                return self
            time.sleep(0.2)
        raise RuntimeError(f"git daemon did not answer on port {self.port}: {self.log_path.read_text()}")

    def stop(self):
        stop_process(self.process, timeout=10)


def bare_repo_of_head(repos: Path) -> Path:
    """A bare repository holding the committed HEAD as its only branch (works from a shallow clone too)."""
    bare = repos / f"{REPO_NAME}.git"
    git("init", "-q", "--bare", str(bare))
    git("config", "receive.shallowUpdate", "true", cwd=bare)
    git("push", "-q", str(bare), "HEAD:refs/heads/main")
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=bare)
    return bare


def broken_pack_repo(repos: Path, scratch: Path) -> Path:
    """A pack whose import fails, for the manager's import-failure report to name."""
    scratch.mkdir()
    (scratch / "__init__.py").write_text('raise ImportError("krea2 test: this pack fails to import on purpose")\n')
    git("init", "-q", cwd=scratch)
    git("add", "__init__.py", cwd=scratch)
    git("-c", "user.name=test", "-c", "user.email=test@localhost", "commit", "-q", "-m", "fails", cwd=scratch)
    bare = repos / f"{BROKEN_NAME}.git"
    git("clone", "-q", "--bare", str(scratch), str(bare))
    return bare


@pytest.fixture(scope="module")
def git_server(tmp_path_factory):
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("git is not installed")
    if not (Path(git("--exec-path")) / "git-daemon").exists():
        pytest.skip("`git daemon` is not installed (Debian/Ubuntu: part of the git package; Fedora: git-daemon)")
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=REPO_ROOT, capture_output=True, text=True)
    if inside.stdout.strip() != "true":
        pytest.skip("this pack is not a git checkout, so there is no commit to serve")
    root = tmp_path_factory.mktemp("git_server")
    repos = root / "repos"
    repos.mkdir()
    bare_repo_of_head(repos)
    broken_pack_repo(repos, root / "broken_pack")
    daemon = GitDaemon(repos)
    try:
        yield daemon.start(probe=REPO_NAME)
    finally:
        daemon.stop()


# --- cm-cli install -------------------------------------------------------------------------

def forget_new_empty_folders(folder: Path, existed_before: bool):
    """Remove ``folder`` and its empty subfolders if this test made them (cm-cli 4.2.2 creates
    ComfyUI's user/__manager at import, before it reads --user-directory). Anything with a file in
    it stays."""
    if existed_before or not folder.is_dir():
        return
    for sub in folder.iterdir():
        if sub.is_dir():
            try:
                sub.rmdir()
            except OSError:
                pass
    try:
        folder.rmdir()
    except OSError:
        pass


@pytest.fixture(scope="module")
def installed(comfy_root, manager_version, git_server, tmp_path_factory):
    """Run cm-cli install into a private custom_nodes; yields what it did. Removes the pack afterwards."""
    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("manager_base"), link_pack=False)
    custom_nodes = base / "custom_nodes"
    manager_dir = base / "user" / "__manager"  # what the server calls folder_paths.get_system_user_directory("manager")
    manager_dir.mkdir(parents=True, exist_ok=True)
    (manager_dir / "config.ini").write_text(MANAGER_CONFIG)
    (manager_dir / "extra_model_paths.yaml").write_text(
        f"krea2_manager_test:\n  is_default: true\n  custom_nodes: {custom_nodes}\n")

    url = git_server.url(REPO_NAME)
    cm_cli = Path(comfyui_python(comfy_root)).parent / "cm-cli"
    command = [str(cm_cli), "install", "--user-directory", str(manager_dir), url]
    comfy_nodes_before = listing(comfy_root / "custom_nodes")
    user_dirs = [comfy_root / "user" / "__manager", comfy_root / "user"]
    existed = {folder: folder.exists() for folder in user_dirs}
    pack_dir = custom_nodes / REPO_NAME
    try:
        # Wide, colourless output so cm-cli's lines are not wrapped; COMFYUI_PATH is how cm-cli finds ComfyUI.
        env = {**os.environ, "COMFYUI_PATH": str(comfy_root), "COLUMNS": "400", "NO_COLOR": "1"}
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=base)
        (base / "cm-cli.log").write_text(result.stdout + result.stderr)
        # The broken pack goes in with plain git: the manager knows a pack by its folder and git remote.
        git("clone", "-q", git_server.url(BROKEN_NAME), str(custom_nodes / BROKEN_NAME))
        yield {"base": base, "url": url, "result": result, "pack_dir": pack_dir,
               "comfy_nodes_before": comfy_nodes_before}
    finally:
        shutil.rmtree(pack_dir, ignore_errors=True)
        shutil.rmtree(custom_nodes / BROKEN_NAME, ignore_errors=True)
        for folder in user_dirs:
            forget_new_empty_folders(folder, existed[folder])


@pytest.fixture(scope="module")
def manager_server(comfy_root, installed, tiny_shape):
    """ComfyUI with --enable-manager on the private base directory cm-cli installed into."""
    from devkit.krea2_synthetic import save_native_checkpoint

    result = installed["result"]
    if result.returncode != 0 or not installed["pack_dir"].is_dir():
        pytest.fail(f"cm-cli install failed (exit {result.returncode}): {cm_cli_output(result)[-4000:]}")
    base = installed["base"]
    save_native_checkpoint(base / "models" / "diffusion_models" / TINY_MODEL, tiny_shape, seed=0)
    write_tiny_vae(comfy_root, base)
    server = ComfyServer(comfy_root, base, extra_args=["--enable-manager"], link_pack=False)
    try:
        yield server.start()
    finally:
        server.stop()


# --- checks --------------------------------------------------------------------------------------

def test_cm_cli_installs_the_pack_from_its_git_url(installed, comfy_root):
    result, url = installed["result"], installed["url"]
    output = cm_cli_output(result)
    assert result.returncode == 0, output[-4000:]
    assert f"[INSTALLED] {url}" in output and "Installation was successful." in output, output[-4000:]
    # The manager's requirements step: one pip install per line of requirements.txt.
    for requirement in requirement_lines():
        assert f"'install', '{requirement}'" in output, f"no pip install of {requirement}:\n{output[-4000:]}"

    pack_dir = installed["pack_dir"]
    assert git("rev-parse", "HEAD", cwd=pack_dir) == git("rev-parse", "HEAD")
    assert git("remote", "get-url", "origin", cwd=pack_dir) == url
    assert (pack_dir / "__init__.py").is_file() and (pack_dir / "requirements.txt").is_file()
    assert listing(comfy_root / "custom_nodes") == installed["comfy_nodes_before"], "ComfyUI's own custom_nodes changed"


def test_server_lists_both_nodes_from_the_installed_folder(manager_server):
    object_info = manager_server.get("/object_info")
    modules = {name: object_info.get(name, {}).get("python_module") for name in NODES}
    assert modules == {name: f"custom_nodes.{REPO_NAME}" for name in NODES}, modules


def test_manager_reports_no_import_failure(manager_server, installed, git_server, manager_version):
    def get_text(path: str) -> str:
        import urllib.request

        with urllib.request.urlopen(manager_server.url + path, timeout=30) as response:
            return response.read().decode()

    assert get_text("/v2/manager/version") == f"V{manager_version}"
    packs = manager_server.get("/v2/customnode/installed?mode=imported")
    assert packs.get(REPO_NAME, {}).get("enabled") is True, packs
    assert packs[REPO_NAME]["ver"] == git("rev-parse", "HEAD"), packs

    urls = [installed["url"], git_server.url(BROKEN_NAME)]
    failures = manager_server.post("/v2/customnode/import_fail_info_bulk", {"urls": urls})
    assert failures[installed["url"]] is None, failures[installed["url"]]
    # The same report names a pack that does fail, so the None above is a real "no failure".
    assert "fails to import on purpose" in (failures[git_server.url(BROKEN_NAME)] or {}).get("error", ""), failures


def test_turbo_template_runs(manager_server, tiny_shape):
    # The template as the editor's template browser serves it from the installed pack.
    assert TURBO.removesuffix(".json") in manager_server.get("/workflow_templates").get(REPO_NAME, [])
    workflow = manager_server.get(f"/api/workflow_templates/{REPO_NAME}/{TURBO}")
    prompt = example_prompt(workflow, manager_server.get("/object_info"), vae_name=TINY_VAES["wan21"][0],
                            context_features=tiny_shape.context_features, prefix="manager/turbo")
    prompt_id, _, run = run_example(manager_server, prompt)
    assert run["prompt_id"] == prompt_id
    assert (run["status"], run["steps"], run["cfg"]) == ("ok", 8, 1.0), run
