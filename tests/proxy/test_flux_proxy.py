"""The small trained Flux (devkit/flux_proxy.py) in the real server: ComfyUI's ``UNETLoader`` builds it as
its own Flux, it has learned its classes, and the pack's two methods run on both of its block lists and
land below fewer steps at the same model calls.

It is a base model sampled with CFG (20 steps at 3.5, cond and uncond batched), as Chroma and Flux.2 Klein
base are run. A small model on procedural images: dynamics, not Flux quality.
"""

from __future__ import annotations

import pytest
import torch
from devkit.comfy_harness import ComfyServer, prompt_error
from devkit.krea2_prompts import FLUX_PROXY_MODEL, proxy_prompt, with_forecast
from devkit.proxy_classifier import fitted_classifier

from krea2_cachedit.adapters.families.registry import SUPPORTED
from krea2_cachedit.adapters.image_compare import mae_255_and_mse

pytestmark = pytest.mark.tier("proxy")

CLASSES = 8
RECIPE = dict(steps=20, cfg=3.5)
# The share of uncached samples at the recipe's steps the classifier must read as their class.
TRAINED_ACCURACY = 0.9
# Images the methods are measured on: (class, seed), none of them the build's held-out seeds.
IMAGES = ((0, 40), (5, 41), (2, 42))


@pytest.fixture(scope="module")
def flux_server(comfy_root, tmp_path_factory, flux_proxy):
    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_flux_proxy_base"))
    (base / "models" / "diffusion_models" / FLUX_PROXY_MODEL).symlink_to(flux_proxy.checkpoint)
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


def sample(server, flux_proxy, *, label, seed, steps, cfg=RECIPE["cfg"], cache=None, forecast=None, batch=1):
    """Decoded images (B, 3, 128, 128) of one prompt, and its stats record (None without a node)."""
    prompt = proxy_prompt(label=label, seed=seed, steps=steps, cfg=cfg, cache=cache if forecast is None else {},
                          batch=batch, model=FLUX_PROXY_MODEL, prefix="flux_proxy")
    if forecast is not None:
        prompt = with_forecast(prompt, **forecast)
    if cache is None and forecast is None:
        entry, record = server.run(prompt), None
        assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    else:
        entry, [record] = server.run_with_stats(prompt)
    return flux_proxy.decode(server.saved_latent(entry, "7")), record


def mae_255(image, reference) -> float:
    return mae_255_and_mse(image, reference)[0]


def test_its_build_record_passes_the_held_out_checks(flux_proxy):
    """The build's own check, on noise seeds no test or benchmark samples: at its recipe's steps its samples
    read as their class, and more of them than from a single step (one prediction), which lies farther from
    its class."""
    held_out = flux_proxy.info["held_out"]
    by_steps = held_out["by_steps"]
    recipe, one_step = by_steps[str(held_out["recipe_steps"])], by_steps["1"]
    assert recipe["accuracy"] >= TRAINED_ACCURACY, held_out
    assert recipe["accuracy"] > one_step["accuracy"] and recipe["class_distance"] < one_step["class_distance"], held_out


def test_its_samples_read_as_their_class_through_the_server(flux_server, flux_proxy):
    """Through ComfyUI's own sampling (UNETLoader, KSampler, the ``simple`` schedule of the config ComfyUI
    detects): two seeds per class at 20 steps read as their class, by the classifier fitted on the data set;
    from a single step fewer do."""
    classifier = fitted_classifier()
    recipe, one_step, labels = [], [], []
    for label in range(CLASSES):
        recipe.append(sample(flux_server, flux_proxy, label=label, seed=500 + label, batch=2, **RECIPE)[0])
        one_step.append(sample(flux_server, flux_proxy, label=label, seed=500 + label, batch=2, steps=1)[0])
        labels.append(torch.full((2,), label))
    labels = torch.cat(labels)
    read = {name: float((classifier.predict(torch.cat(images)) == labels).float().mean())
            for name, images in (("recipe", recipe), ("one step", one_step))}
    assert read["recipe"] >= TRAINED_ACCURACY and read["one step"] < read["recipe"], read


def test_the_dbcache_node_runs_on_its_two_block_lists(flux_server, flux_proxy):
    """ComfyUI builds it as its Flux (the registry's Flux entry serves it), and the node's defaults
    (F1B0, warmup 4, threshold 0.24) cache steps of both lists on it, each list deciding from its own
    first block."""
    flux = next(family for family in SUPPORTED if family.model == "Flux")
    label, seed = IMAGES[0]
    _, record = sample(flux_server, flux_proxy, label=label, seed=seed, cache={}, **RECIPE)
    assert record["status"] == "ok" and record["model"] == flux.name, record
    lists = {entry["blocks"]: entry for entry in record["block_lists"]}
    assert {name: entry["size"] for name, entry in lists.items()} == {
        "double_blocks": flux_proxy.settings.double_blocks, "single_blocks": flux_proxy.settings.single_blocks}
    assert lists["double_blocks"]["cached_steps"] and lists["single_blocks"]["cached_steps"], record


def _mean_mae(server, flux_proxy, steps: int, **method) -> tuple[float, list[dict]]:
    maes, records = [], []
    for label, seed in IMAGES:
        reference, _ = sample(server, flux_proxy, label=label, seed=seed, **RECIPE)
        image, record = sample(server, flux_proxy, label=label, seed=seed, steps=steps, **method)
        maes.append(mae_255(image, reference))
        records.append(record)
    return sum(maes) / len(maes), records


# At speedup 4 (5 of 20 calls) these images put ``auto`` level with euler at 5 steps (10.89 against 10.86/255),
# where the peer benchmark's images put it below (7.64 against 10.03): not a margin a test can hold.
@pytest.mark.parametrize("speedup", [2.0, 3.0])
def test_auto_lands_below_fewer_steps_at_its_model_calls(flux_server, flux_proxy, speedup):
    """The Forecast node's ``auto`` at 20 steps, planned for this run: closer to the uncached image than
    plain euler at as many model calls, on a model its rule was not tuned on."""
    auto, records = _mean_mae(flux_server, flux_proxy, RECIPE["steps"], forecast={"preset": "auto", "speedup": speedup})
    calls = {record["full_calls"] for record in records}
    assert len(calls) == 1 and calls != {RECIPE["steps"]}, records
    fewer, _ = _mean_mae(flux_server, flux_proxy, calls.pop())
    print(f"auto at speedup {speedup:g}: MAE/255 {auto:.2f}; euler at as many calls {fewer:.2f}")
    assert auto < fewer
