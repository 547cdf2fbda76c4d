"""Start the real ComfyUI server with this pack and drive it over HTTP.

Finds ComfyUI the way the README says (``COMFYUI_PATH``, the ComfyUI whose
``custom_nodes`` holds this pack, or ``~/comfy/ComfyUI``), gives it a private
base directory (custom nodes, models, input, output) and talks to it only
through its public HTTP API, like the graph editor does.

Stdlib only at import time: ``dev.py`` imports it before any environment exists.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACK_DIR_NAME = "krea2_cachedit"
TEST_NODES_DIR = Path(__file__).resolve().parent / "comfy_test_nodes"
# What only the server process knows, served by devkit/comfy_test_nodes/measurement.py.
MEMORY_ROUTE = "/krea2_test/cuda_memory"          # CUDA peak memory: GET reads, POST resets
COMPILE_ROUTE = "/krea2_test/compile_counters"    # torch._dynamo's graphs, graph breaks, recompiles
WATCH_ROUTE = "/krea2_test/model_watch"           # a watched model: alive, left changed, held by a registry
TENSOR_ROUTE = "/krea2_test/tensor_memory"        # the tensors alive in the server (after a gc), by device
STATS_ROUTE = "/krea2_cachedit/stats"
FREE = {"unload_models": True, "free_memory": True}   # POST /free's body, as the editor's button sends it
# Third-party ComfyUI packs that tests install into a test server (snapshots at fixed commits, never
# part of this repository): beside the clone in ../shared/third_party, or where this variable says.
THIRD_PARTY_ENV = "KREA2_THIRD_PARTY_DIR"
# Comma-separated test tiers that must all run and pass without a skip (CI sets it; see conftest).
REQUIRE_TIERS_ENV = "KREA2_REQUIRE_TIERS"


def repo_env(env: dict | None = None) -> dict:
    """The environment for a child Python that imports ``devkit`` or ``benchmarks``: the repository root
    on ``PYTHONPATH``. That comes after the child's first path entry (its working folder for ``-c``, its
    folder for a script), so a child working in ComfyUI's folder finds ComfyUI's ``nodes`` module, not the
    pack's ``nodes/`` folder."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def required_tiers() -> list[str]:
    return [tier.strip() for tier in os.environ.get(REQUIRE_TIERS_ENV, "").split(",") if tier.strip()]


def third_party_pack(name: str) -> Path | None:
    """The snapshot folder of the third-party pack ``name``, or None when there is none."""
    root = Path(os.environ.get(THIRD_PARTY_ENV) or REPO_ROOT.parent / "shared" / "third_party").expanduser()
    folder = root / name
    return folder.resolve() if (folder / "__init__.py").is_file() else None


def load_pack():
    """Import the repository as the package ComfyUI would see (a folder in custom_nodes)."""
    if PACK_DIR_NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PACK_DIR_NAME, REPO_ROOT / "__init__.py", submodule_search_locations=[str(REPO_ROOT)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[PACK_DIR_NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[PACK_DIR_NAME]


def find_comfyui() -> Path | None:
    """The ComfyUI checkout to test against, or None when there is none.

    ``COMFYUI_PATH``, when set, is the only place looked at: a wrong path must not
    quietly fall back to another ComfyUI (and pointing it at an empty folder is how
    to run as if no ComfyUI were installed).
    """
    if os.environ.get("COMFYUI_PATH"):
        path = Path(os.environ["COMFYUI_PATH"]).expanduser()
        return path.resolve() if _is_comfyui(path) else None
    candidates = []
    if REPO_ROOT.parent.name == "custom_nodes":
        candidates.append(REPO_ROOT.parent.parent)
    candidates.append(Path.home() / "comfy" / "ComfyUI")
    return next((path.resolve() for path in candidates if _is_comfyui(path)), None)


def put_comfyui_on_path(comfy_root: Path):
    """ComfyUI's own modules (``comfy``, its ``nodes``) importable in this process: its folder first on the
    path, ahead of this repository (whose ``nodes/`` is the pack's). The one place that changes the path."""
    if sys.path[:1] != [str(comfy_root)]:
        sys.path.insert(0, str(comfy_root))


def use_comfyui_in_process(comfy_root: Path):
    """Make this process able to import ComfyUI's own modules as its CPU server would (benchmarks that
    run ComfyUI's sampler in process): ComfyUI on the path and as the working folder, its options
    parsed from ``--cpu``."""
    put_comfyui_on_path(comfy_root)
    os.chdir(comfy_root)
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.options

    comfy.options.enable_args_parsing()


def _is_comfyui(path: Path) -> bool:
    return (path / "main.py").is_file() and (path / "comfy").is_dir()


def comfyui_python(comfy_root: Path) -> str:
    """The interpreter that runs ComfyUI: its own venv when it has one."""
    for rel in (".venv/bin/python", "venv/bin/python"):
        candidate = comfy_root / rel
        if candidate.exists():
            return str(candidate)
    return sys.executable


def stop_process(process: subprocess.Popen | None, timeout: float):
    """Terminate a process the tests started (if it still runs); kill it if it does not stop in time."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """The server's port was bound by another process before it could bind it."""


class ComfyServer:
    """One real ComfyUI process (on the CPU unless ``cpu=False``), with a private base directory."""

    def __init__(self, comfy_root: Path, base_dir: Path, extra_args: list[str] | None = None, cpu: bool = True,
                 link_pack: bool = True):
        self.comfy_root = comfy_root
        self.base_dir = base_dir
        self.link_pack = link_pack
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_args = extra_args or []
        self.cpu = cpu
        self.process: subprocess.Popen | None = None
        self.log_path = base_dir / "comfyui.log"
        self.client_id = uuid.uuid4().hex

    # --- layout -----------------------------------------------------------------
    @staticmethod
    def prepare_base_dir(base_dir: Path, link_pack: bool = True) -> Path:
        """Custom nodes (this pack + the test helpers) and empty model folders.

        ``link_pack=False`` leaves the pack out, for a test that installs it the way users do.
        """
        for sub in ("custom_nodes", "models/diffusion_models", "models/diffusers", "models/loras",
                    "models/vae", "models/text_encoders", "input", "output", "user", "temp"):
            (base_dir / sub).mkdir(parents=True, exist_ok=True)
        links = {"krea2_cachedit_test_nodes": TEST_NODES_DIR}
        if link_pack:
            links[PACK_DIR_NAME] = REPO_ROOT
        for name, target in links.items():
            link = base_dir / "custom_nodes" / name
            if not link.exists():
                link.symlink_to(target, target_is_directory=True)
        return base_dir

    # --- process ----------------------------------------------------------------
    def start(self, timeout: float = 120.0, tries: int = 3) -> "ComfyServer":
        """Start the process and wait until it answers; a port another server took between ``free_port``
        and the bind (test runs side by side) is given up for a new one."""
        for _ in range(tries - 1):
            try:
                return self._start(timeout)
            except PortTaken:
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
        return self._start(timeout)

    def _start(self, timeout: float) -> "ComfyServer":
        self.prepare_base_dir(self.base_dir, self.link_pack)
        cmd = [comfyui_python(self.comfy_root), "main.py", *(["--cpu"] if self.cpu else []), "--listen", "127.0.0.1",
               "--port", str(self.port), "--disable-auto-launch", "--base-directory", str(self.base_dir),
               "--disable-metadata",
               # ComfyUI's default database lives in its own folder, whatever --base-directory says:
               # keep each test server's private so servers side by side never share (or lock) one.
               "--database-url", f"sqlite:///{self.base_dir / 'user' / 'comfyui.db'}", *self.extra_args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(cmd, cwd=self.comfy_root, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                self._log.close()
                if "address already in use" in self.log_tail(2000).lower():
                    raise PortTaken(self.port)
                raise RuntimeError(f"ComfyUI exited early:\n{self.log_tail()}")
            try:
                # The server on the port must be this one (its argv names this base directory), not another's.
                if str(self.base_dir) in self.get("/system_stats")["system"]["argv"]:
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"ComfyUI did not start in {timeout}s:\n{self.log_tail()}")

    def stop(self):
        stop_process(self.process, timeout=20)
        if getattr(self, "_log", None):
            self._log.close()

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # --- HTTP -------------------------------------------------------------------
    def get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.loads(response.read())

    def post(self, path: str, payload: dict):
        request = urllib.request.Request(self.url + path, data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace")
            raise RuntimeError(f"POST {path} -> {error.code}: {body}") from None

    def free(self, timeout: float = 60.0) -> None:
        """POST /free (unload the models, free the memory) and wait until the prompt worker has taken
        the flags (the test nodes' watch route lists those still pending): it unloads and resets its
        caches before it takes another prompt."""
        self.post("/free", FREE)
        deadline = time.time() + timeout
        while self.get(WATCH_ROUTE)["pending_flags"]:
            if time.time() > deadline:
                raise TimeoutError(f"the server did not take POST /free in {timeout:g}s")
            time.sleep(0.1)

    def refusal(self, prompt: dict) -> tuple[dict, str]:
        """POST /prompt for a prompt the server must refuse: its 400 answer, parsed, and the raw body.

        ``json.dumps`` writes NaN and infinities as the bare ``NaN``/``Infinity`` that the
        server's parser (Python's json) reads back as floats, so they arrive as such.
        """
        body = json.dumps({"prompt": prompt, "client_id": self.client_id}).encode()
        request = urllib.request.Request(self.url + "/prompt", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raise AssertionError(f"the server queued the prompt: {response.read().decode(errors='replace')}")
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            assert error.code == 400, f"POST /prompt -> {error.code}: {text}"
            return json.loads(text), text

    def queue(self, prompt: dict) -> str:
        answer = self.post("/prompt", {"prompt": prompt, "client_id": self.client_id})
        return answer["prompt_id"]

    def wait(self, prompt_id: str, timeout: float = 600.0) -> dict:
        """The history entry of a finished prompt (success or error)."""
        deadline = time.time() + timeout
        pause = 0.005   # a tiny model's prompt takes tenths of a second: look often at first, then less often
        while time.time() < deadline:
            history = self.get(f"/history/{prompt_id}")
            if prompt_id in history and history[prompt_id].get("status", {}).get("completed") is not None:
                entry = history[prompt_id]
                if entry["status"].get("status_str") in ("success", "error"):
                    return entry
            time.sleep(pause)
            pause = min(pause * 1.5, 0.2)
        raise TimeoutError(f"prompt {prompt_id} did not finish in {timeout}s\n{self.log_tail()}")

    def run(self, prompt: dict, timeout: float = 600.0) -> dict:
        return self.wait(self.queue(prompt), timeout)

    # --- Cache-DiT stats ---------------------------------------------------------
    def stats_for(self, prompt_id: str, node_id: str | None = None, runs: int = 1) -> list[dict]:
        """The stats records of ``prompt_id`` (of its node ``node_id`` when given), oldest first.

        Fails unless there are exactly ``runs``. The newest record on the route may belong to
        another prompt: when ComfyUI serves a graph it has already run from its output cache,
        nothing samples and no record is published.
        """
        records = [r for r in self.get(STATS_ROUTE)["runs"]
                   if r["prompt_id"] == prompt_id and (node_id is None or r["node_id"] == str(node_id))]
        if len(records) != runs:
            of_node = f" node {node_id}" if node_id is not None else ""
            raise AssertionError(
                f"expected {runs} Cache-DiT stats record(s) from prompt {prompt_id}{of_node}, found {len(records)}"
                f"{' (nothing sampled: was an identical graph served from ComfyUI cache?)' if not records else ''}"
                f": {records}\n{self.log_tail(3000)}")
        return records

    def run_with_stats(self, prompt: dict, node_id: str | None = "5", runs: int = 1,
                       timeout: float = 600.0) -> tuple[dict, list[dict]]:
        """Run a prompt that must succeed; its history entry and its own stats records (see ``stats_for``)."""
        prompt_id = self.queue(prompt)
        entry = self.wait(prompt_id, timeout)
        error = prompt_error(entry)
        if error is not None:
            raise AssertionError(f"prompt failed: {error}\n{self.log_tail()}")
        return entry, self.stats_for(prompt_id, node_id, runs)

    # --- outputs ----------------------------------------------------------------
    def saved_latent(self, entry: dict, node_id: str):
        """Load the latent that a SaveLatent node wrote for this prompt."""
        from safetensors.torch import load_file

        item = entry["outputs"][node_id]["latents"][0]
        path = self.base_dir / "output" / item.get("subfolder", "") / item["filename"]
        return load_file(str(path))["latent_tensor"]


def strict_loads(text: str | bytes):
    """``text`` parsed as strict JSON: a bare NaN or Infinity fails, as in the editor's JSON.parse."""
    def refuse(constant):
        raise ValueError(f"not strict JSON: bare {constant}")
    return json.loads(text, parse_constant=refuse)


def prompt_error(entry: dict) -> str | None:
    """The exception message of a failed prompt, or None when it succeeded."""
    if entry["status"].get("status_str") == "success":
        return None
    for kind, data in entry["status"].get("messages", []):
        if kind == "execution_error":
            return f"{data.get('exception_type')}: {data.get('exception_message')}"
    return "failed without an execution_error message"
