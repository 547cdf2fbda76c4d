"""The Cache-DiT node across servers with ComfyUI-Distributed: a master and two worker ComfyUIs on 127.0.0.1.

ComfyUI-Distributed (a third-party pack, installed into each test server from its snapshot beside the
clone, see ``comfy_harness.third_party_pack``) takes a workflow on the master's
``POST /distributed/queue`` and sends it to every worker over HTTP; each worker's
``DistributedSeed`` adds its index + 1 to the seed, and the master's ``DistributedCollector``
gathers every participant's images (master first, then the workers in their order) as PNGs sent
over HTTP. Each participant runs the Cache-DiT node on its own prompt, with its own cache, and
publishes its own record on its own ``GET /krea2_cachedit/stats``.

The images are the sampled latents' bytes (``Krea2TestLatentBytes``, no VAE), which an 8-bit PNG
carries exactly: equal images are bit-identical latents.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

from devkit.comfy_harness import ComfyServer, prompt_error, third_party_pack
from helpers import FAST, FAST_8_CACHED, OFF, run_ok
from devkit.krea2_prompts import TINY_MODEL, krea2_prompt
from devkit.krea2_synthetic import save_native_checkpoint

pytestmark = [pytest.mark.comfyui, pytest.mark.tier("comfyui")]

DISTRIBUTED = "ComfyUI-Distributed"
WORKERS = ("worker-a", "worker-b")     # registered in this order: DistributedSeed adds 1, then 2
SEED = 10
# Node ids over krea2_prompt's ("5" Cache-DiT, "6" KSampler, "7" SaveLatent).
SEED_NODE, IMAGE_NODE, COLLECTOR, SAVE = "20", "21", "22", "23"
WORKFLOW_ID = "distributed-test-workflow"   # the editor workflow's id, as the editor sends it


@pytest.fixture(scope="module")
def cluster(comfy_root, tmp_path_factory, tiny_shape) -> dict[str, ComfyServer]:
    """A master and two workers, each with this pack and ComfyUI-Distributed, the workers registered
    with the master through ComfyUI-Distributed's own config route."""
    snapshot = third_party_pack(DISTRIBUTED)
    if snapshot is None:
        pytest.skip(f"no {DISTRIBUTED} snapshot: put it in ../shared/third_party beside the clone "
                    f"(or set KREA2_THIRD_PARTY_DIR)")
    checkpoint = tmp_path_factory.mktemp("distributed_model") / TINY_MODEL
    save_native_checkpoint(checkpoint, tiny_shape, seed=0)
    servers = {}
    for name in ("master", *WORKERS):
        base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp(f"distributed_{name}"))
        # A copy, not a link: the pack writes its config (gpu_config.json) into its own folder.
        shutil.copytree(snapshot, base / "custom_nodes" / DISTRIBUTED,
                        ignore=shutil.ignore_patterns(".git", "tests", "node_modules"))
        (base / "models" / "diffusion_models" / TINY_MODEL).symlink_to(checkpoint)
        servers[name] = ComfyServer(comfy_root, base)
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(ComfyServer.start, servers.values()))
        master = servers["master"]
        for name in WORKERS:
            master.post("/distributed/config/update_worker", {
                "worker_id": name, "name": name, "host": "127.0.0.1", "port": servers[name].port,
                "cuda_device": 0, "enabled": True, "type": "remote"})
        registered = {w["id"]: w for w in master.get("/distributed/config")["workers"]}
        assert [registered[name]["port"] for name in WORKERS] == [servers[name].port for name in WORKERS]
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def distributed_prompt(cache: dict | None, seed: int = SEED, prefix: str = "distributed") -> dict:
    """krea2_prompt's graph, its seed from DistributedSeed, its latent as an image through the collector."""
    prompt = krea2_prompt(cache=cache, seed=seed, prefix=prefix)
    prompt[SEED_NODE] = {"class_type": "DistributedSeed", "inputs": {"seed": seed}}
    prompt["6"]["inputs"]["seed"] = [SEED_NODE, 0]
    prompt[IMAGE_NODE] = {"class_type": "Krea2TestLatentBytes", "inputs": {"samples": ["6", 0]}}
    prompt[COLLECTOR] = {"class_type": "DistributedCollector",
                         "inputs": {"images": [IMAGE_NODE, 0], "load_balance": False}}
    prompt[SAVE] = {"class_type": "SaveImage", "inputs": {"images": [COLLECTOR, 0], "filename_prefix": prefix}}
    return prompt


def saved_images(server: ComfyServer, entry: dict) -> list[np.ndarray]:
    """The images SaveImage wrote for a prompt, in order, as uint8 arrays."""
    items = entry["outputs"][SAVE]["images"]
    return [np.array(Image.open(server.base_dir / "output" / item.get("subfolder", "") / item["filename"]))
            for item in items]


def image_latent(image: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """The latent whose bytes ``image`` holds (Krea2TestLatentBytes undone), shaped like ``like``."""
    data = torch.from_numpy(image.reshape(-1)[: like.numel() * 4].copy())
    return data.view(torch.float32).reshape(like.shape[1:])


def history_entry(server: ComfyServer, job_id: str, timeout: float = 120.0) -> tuple[str, dict]:
    """The prompt id and finished history entry of the prompt a worker ran for the master's ``job_id``.

    The worker's collector hands its images to the master before its own prompt ends, so the master can finish
    first: the worker's entry reaches its /history a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        for prompt_id, entry in server.get("/history").items():
            if entry["prompt"][2].get(COLLECTOR, {}).get("inputs", {}).get("multi_job_id") == job_id:
                return prompt_id, server.wait(prompt_id)
        if time.monotonic() > deadline:
            raise AssertionError(f"no prompt of job {job_id} on {server.url} in {timeout:g} s\n{server.log_tail()}")
        time.sleep(0.2)


def distributed_run(cluster: dict[str, ComfyServer], cache: dict | None, prefix: str):
    """Queue through POST /distributed/queue; the collected images, and per participant its prompt id,
    its graph as it ran there and its Cache-DiT record (None without the node).

    A worker's prompt is found as the docs say (docs/stats.md, "More than one machine"): the entry of
    its /history whose collector has the master's ``multi_job_id``."""
    master = cluster["master"]
    answer = master.post("/distributed/queue", {"prompt": distributed_prompt(cache, prefix=prefix),
                                                "workflow": {"id": WORKFLOW_ID}, "client_id": master.client_id,
                                                "enabled_worker_ids": list(WORKERS)})
    assert answer["worker_count"] == len(WORKERS), f"{answer}\n{master.log_tail()}"
    entry = master.wait(answer["prompt_id"])
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{master.log_tail()}"
    job_id = entry["prompt"][2][COLLECTOR]["inputs"]["multi_job_id"]
    runs = {"master": (answer["prompt_id"], entry)}
    for name in WORKERS:
        runs[name] = history_entry(cluster[name], job_id)
        assert prompt_error(runs[name][1]) is None, f"{name}: {prompt_error(runs[name][1])}"
    participants = {}
    for name, (prompt_id, run) in runs.items():
        record = cluster[name].stats_for(prompt_id, "5")[0] if cache is not None else None
        participants[name] = {"prompt_id": prompt_id, "graph": run["prompt"][2], "record": record}
    return saved_images(master, entry), participants


def single_server_images(server: ComfyServer, cache: dict | None, seeds: list[int]) -> list[np.ndarray]:
    """The same graph queued on one server (plain /prompt) with each seed value: one image each."""
    images = []
    for seed in seeds:
        [image] = saved_images(server, run_ok(server, distributed_prompt(cache, seed=seed, prefix="single")))
        images.append(image)
    return images


def assert_same_images(collected: list[np.ndarray], single: list[np.ndarray], seeds: list[int]):
    assert len(collected) == len(single), f"collected {len(collected)} images, expected {len(single)}"
    for name, seed, got, want in zip(("master", *WORKERS), seeds, collected, single):
        differing = int((got != want).sum()) if got.shape == want.shape else got.size
        assert differing == 0, f"{name}'s image differs from seed {seed}'s on one server in {differing} bytes"


@pytest.fixture(scope="module")
def cached_run(cluster):
    """The cached workflow (steps mask ``fast``: steps 3, 5 and 6 of 8 cached) through the cluster, once."""
    return distributed_run(cluster, FAST, "distributed_cached")


def test_every_participant_caches_its_own_prompt_and_matches_one_server(cluster, cached_run):
    master = cluster["master"]
    collected, participants = cached_run
    seeds = [SEED + offset for offset in range(len(participants))]
    for name, participant in participants.items():
        record = participant["record"]
        assert record["prompt_id"] == participant["prompt_id"]
        # Every participant's record names the client and workflow that queued the run on the master.
        assert (record["client_id"], record["workflow_id"]) == (master.client_id, WORKFLOW_ID), name
        assert record["status"] == "ok" and record["cached_steps"] == FAST_8_CACHED, (name, record["status"],
                                                                                     record["cached_steps"])
        expected_worker = "" if name == "master" else f"worker_{WORKERS.index(name)}"
        assert participant["graph"][SEED_NODE]["inputs"]["worker_id"] == expected_worker
    assert_same_images(collected, single_server_images(master, FAST, seeds), seeds)
    # The images are the latents: the master's decodes to the latent it saved, and each seed's is its own.
    master_latent = master.saved_latent(master.wait(participants["master"]["prompt_id"]), "7")
    assert torch.equal(image_latent(collected[0], master_latent), master_latent[0])
    assert all(not np.array_equal(collected[i], collected[j]) for i in range(3) for j in range(i + 1, 3))


def test_caching_off_is_no_node_on_every_participant(cluster, cached_run):
    collected, participants = distributed_run(cluster, OFF, "distributed_off")
    seeds = [SEED + offset for offset in range(len(participants))]
    for name, participant in participants.items():
        record = participant["record"]
        assert record["prompt_id"] == participant["prompt_id"]
        assert record["status"] == "ok" and record["cached_steps"] == [], (name, record["cached_steps"])
    assert_same_images(collected, single_server_images(cluster["master"], None, seeds), seeds)
    # Caching changed every participant's image: the equalities above are not those of a cache doing nothing.
    assert all(not np.array_equal(off, on) for off, on in zip(collected, cached_run[0]))
