"""Caching where it matters, on the small trained Krea-2 (devkit/krea2_proxy.py) in the real server.

Seeded-random weights change too much between steps for the default threshold to cache anything;
the proxy has learned its data set, so the node's defaults cache there, the threshold trades
steps for error, and the error is measured on decoded images against the uncached ones. A small
model on procedural images: these are dynamics, not Krea-2 quality.

Turbo-like runs are 8 steps at CFG 1, Raw-like runs 52 steps at CFG 3.5 (cond and uncond batched).
"""

from __future__ import annotations

import math

import pytest
import torch
from comfy_harness import REPO_ROOT, prompt_error
from krea2_prompts import PROXY_MODEL, PROXY_RANDOM_MODEL, proxy_prompt

from krea2_cachedit.adapters.image_compare import mae_255_and_mse, psnr_from_mse

pytestmark = pytest.mark.tier("proxy")

TURBO = dict(steps=8, cfg=1.0)
RAW = dict(steps=52, cfg=3.5)
CLASSES = 8
# The share of the proxy's uncached Raw-like samples the classifier must read as their class.
TRAINED_ACCURACY = 0.9


def mae_255(image, reference) -> float:
    return mae_255_and_mse(image, reference)[0]


def psnr_db(image, reference) -> float:
    return psnr_from_mse(mae_255_and_mse(image, reference)[1], cap=math.inf)


def sample(server, proxy, *, label=0, seed=0, cache=None, batch=1, model=PROXY_MODEL, **recipe):
    """Decoded images (B, 3, 128, 128) of one prompt, and its stats record (None without the node)."""
    prompt = proxy_prompt(label=label, seed=seed, cache=cache, batch=batch, model=model, **recipe)
    if cache is None:
        entry, record = server.run(prompt), None
        assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    else:
        entry, [record] = server.run_with_stats(prompt)
    return proxy.decode(server.saved_latent(entry, "7")), record


def test_the_proxy_is_a_native_krea2_checkpoint(proxy):
    from safetensors import safe_open

    from krea2_synthetic import Krea2Shape, native_shapes

    with safe_open(str(proxy.checkpoint), "pt") as checkpoint:
        shapes = {name: tuple(checkpoint.get_slice(name).get_shape()) for name in checkpoint.keys()}
    assert shapes == native_shapes(Krea2Shape(**proxy.settings.shape_kwargs()))


def predictions(server, proxy, model: str, recipe: dict, per_class: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The classifier's labels for decoded uncached samples of every class, and the true labels."""
    from krea2_proxy_classifier import fitted_classifier

    classifier = fitted_classifier()
    predicted, labels = [], []
    for label in range(CLASSES):
        images, _ = sample(server, proxy, label=label, seed=500 + label, batch=per_class, model=model, **recipe)
        predicted.append(classifier.predict(images))
        labels.append(torch.full((per_class,), label))
    return torch.cat(predicted), torch.cat(labels)


@pytest.fixture(scope="module")
def classified(proxy_server, proxy):
    """Raw-like uncached samples of the proxy and of seeded-random weights of its shape, classified."""
    return {"trained": predictions(proxy_server, proxy, PROXY_MODEL, RAW, per_class=4),
            "random": predictions(proxy_server, proxy, PROXY_RANDOM_MODEL, RAW, per_class=1)}


def share(hits: torch.Tensor) -> float:
    return float(hits.float().mean())


def test_the_classifier_reads_the_data_set():
    from krea2_proxy import dataset
    from krea2_proxy_classifier import fitted_classifier

    images, labels = dataset(64, seed=99)
    assert share(fitted_classifier().predict(images) == labels) == 1.0


def test_the_classifier_reads_noisy_decodes_of_the_data_set(proxy):
    """A generated image is a decoded latent with errors in it: the data set's images, encoded by the
    proxy's codec with noise added to the latent (std 0.3 per unit-variance channel: grainy colour,
    every shape plain to the eye), still read as their class: at most one of 128 read as another.
    The noise's stray saturated pixels widen the object's box: measured without the mask's smoothing,
    opening and largest part 28% are misread, with all but the largest part 2 of 128."""
    from krea2_proxy import dataset
    from krea2_proxy_classifier import fitted_classifier

    images, labels = dataset(128, seed=98)
    latent = proxy.codec.encode(images)
    noisy = proxy.codec.decode(latent + 0.3 * torch.randn(latent.shape, generator=torch.Generator().manual_seed(0)))
    assert share(fitted_classifier().predict(noisy) == labels) >= 127 / 128


def test_uncached_samples_have_their_colour_scheme(classified):
    """The scheme (warm or cool object) of each class, read back from the decoded image; random weights
    of the same shape are near chance (one in two)."""
    schemes = {name: share(predicted // 4 == labels // 4) for name, (predicted, labels) in classified.items()}
    assert schemes["trained"] >= 0.9 and schemes["random"] <= 0.75, schemes


def test_uncached_samples_are_recognisably_their_class(classified):
    """Shape and scheme: the class, read back by a classifier fitted on the data set."""
    predicted, labels = classified["trained"]
    assert share(predicted == labels) >= TRAINED_ACCURACY, (predicted, labels)


def test_random_weights_are_near_chance_on_the_class(classified):
    """The same classifier on seeded-random weights of the proxy's shape: near chance (one in eight), so
    what it reads on the proxy is what the proxy learned."""
    predicted, labels = classified["random"]
    assert share(predicted == labels) <= 0.25, (predicted, labels)


def cached_count(record: dict) -> int:
    return len(record["cached_steps"])


# What the node's defaults (sglang's settings) cache on the proxy: measured 1 of 8 (Turbo-like) and 36
# of 52 (Raw-like) steps, see the README; random weights of its shape cache none.
DEFAULTS_CACHE_AT_LEAST = {"turbo": 1, "raw": 30}


@pytest.mark.parametrize("name,recipe", [("turbo", TURBO), ("raw", RAW)], ids=["turbo", "raw"])
def test_the_defaults_cache_steps_on_a_trained_model(proxy_server, proxy, name, recipe):
    """sglang's settings cache on a model that has learned (random weights of its shape: nothing), at a
    small cost in the decoded image."""
    for label in (1,):
        reference, _ = sample(proxy_server, proxy, label=label, seed=40 + label, **recipe)
        image, record = sample(proxy_server, proxy, label=label, seed=40 + label, cache={}, **recipe)
        assert record["status"] == "ok" and record["cfg_mode"] == ("batched" if recipe["cfg"] > 1 else "none")
        assert cached_count(record) >= DEFAULTS_CACHE_AT_LEAST[name], record["residual_diffs"]
        assert 0 < mae_255(image, reference) < 10 and psnr_db(image, reference) > 25
        _, random_record = sample(proxy_server, proxy, label=label, seed=40 + label, cache={},
                                  model=PROXY_RANDOM_MODEL, **recipe)
        assert cached_count(random_record) == 0, random_record["residual_diffs"]


def test_the_error_grows_with_the_threshold(proxy_server, proxy):
    """A higher threshold caches more steps and costs more: cached steps and MAE both grow."""
    rows = []
    for threshold in (0.06, 0.24, 0.48):
        maes, counts = [], []
        for label in (2, 7):
            reference, _ = sample(proxy_server, proxy, label=label, seed=60 + label, **TURBO)
            image, record = sample(proxy_server, proxy, label=label, seed=60 + label,
                                   cache={"residual_diff_threshold": threshold, "max_continuous_cached_steps": -1},
                                   **TURBO)
            maes.append(mae_255(image, reference))
            counts.append(cached_count(record))
        rows.append((threshold, sum(counts), sum(maes) / len(maes)))
    counts, maes = [r[1] for r in rows], [r[2] for r in rows]
    assert counts == sorted(counts) and counts[-1] > counts[0], rows
    assert maes == sorted(maes) and maes[-1] > 2 * maes[0], rows


def test_a_suggested_threshold_caches_its_count_on_a_rerun(proxy_server, proxy):
    """Suggestions from a run with caching off (its changes measured on every step) hold within one step."""
    off = {"residual_diff_threshold": 0.0}
    _, measured = sample(proxy_server, proxy, label=3, seed=71, cache=off, **TURBO)
    suggestions = measured["threshold_suggestions"]
    assert len(suggestions) >= 2, suggestions
    for suggestion in suggestions:
        _, rerun = sample(proxy_server, proxy, label=3, seed=71,
                          cache={"residual_diff_threshold": suggestion["threshold"]}, **TURBO)
        assert abs(cached_count(rerun) - len(suggestion["cached_steps"])) <= 1, (suggestion, rerun["cached_steps"])


# TaylorSeer's error over reusing the last residual, at equal cached steps (the fast mask), over two
# classes: at 52 steps it forecasts each cached step from computed steps close by and lowers the error
# (measured 3.07 -> 2.31/255); at 8 steps it forecasts steps 3, 5 and 6 from computed steps 0, 1, 2
# and 4, far apart, and is about as good as reuse (measured 3.35 -> 3.60/255; the previous build,
# which drew crosses instead of bars, 4.3 -> 3.5).
TAYLORSEER_ERROR_RATIO = {"turbo": (0.75, 1.25), "raw": (0.0, 0.9)}


@pytest.mark.parametrize("name,recipe", [("turbo", TURBO), ("raw", RAW)], ids=["turbo", "raw"])
def test_taylorseer_at_equal_cached_steps(proxy_server, proxy, name, recipe):
    """With the fast step mask both runs cache the same steps (8 steps: 3, 5 and 6; 52 steps: 27 of them);
    TaylorSeer changes the image (its forecast replaces the reused residual) and its error against the
    uncached image, relative to reuse's, is within ``TAYLORSEER_ERROR_RATIO``."""
    labels = (0, 5)
    references = [sample(proxy_server, proxy, label=label, seed=90 + label, **recipe)[0] for label in labels]
    cached, errors, images = {}, {}, {}
    for taylorseer in (False, True):
        cached[taylorseer], errors[taylorseer], images[taylorseer] = [], [], []
        for label, reference in zip(labels, references):
            image, record = sample(proxy_server, proxy, label=label, seed=90 + label,
                                   cache={"steps_mask": "fast", "calibrator": "taylorseer" if taylorseer else "none"}, **recipe)
            errors[taylorseer].append(mae_255(image, reference))
            cached[taylorseer].append(record["cached_steps"])
            images[taylorseer].append(image)
    assert cached[False] == cached[True] and cached[True][0], cached
    changed = [mae_255(with_forecast, reused) for with_forecast, reused in zip(images[True], images[False])]
    assert min(changed) > 0.1, changed
    low, high = TAYLORSEER_ERROR_RATIO[name]
    ratio = sum(errors[True]) / sum(errors[False])
    assert low < ratio < high, errors


def test_the_compare_template_runs_on_the_proxy(proxy_server, proxy):
    """The shipped compare template, on the proxy with its decode node: the cached branch really caches, each
    compare node's MAE is that of the two images it shows, and the fewer-steps branch samples no more steps than
    the cached run costs (the template's count is the fewest the default threshold allows)."""
    import json

    import numpy as np
    from example_stand_ins import example_prompt_on_proxy, saved_images
    from krea2_prompts import PROXY_SIZE
    from test_example_workflows import compare_branches, sampled_by

    workflow = json.loads((REPO_ROOT / "example_workflows" / "krea2_turbo_compare.json").read_text())
    prompt = example_prompt_on_proxy(workflow, proxy_server.get("/object_info"), label=5, prefix="proxy_compare")
    (cache_id,) = [n for n, node in prompt.items() if node["class_type"] == "Krea2CacheDiT"]
    entry, [record] = proxy_server.run_with_stats(prompt, node_id=cache_id)
    assert cached_count(record) >= 1, record["residual_diffs"]
    saved = saved_images(proxy_server, prompt, entry)
    by_source = {prompt[n]["inputs"]["images"][0]: np.asarray(png, dtype=np.float64) for n, png in saved.items()}
    branches = compare_branches(prompt)
    (fewer_id,) = branches["fewer"]
    # The proxy's few blocks make a cached step's first block weigh more than the real model's 28 do.
    assert prompt[fewer_id]["inputs"]["steps"] <= record["equal_cost_steps"] <= record["steps"], record
    for compare_id in [n for n, node in prompt.items() if node["class_type"] == "Krea2CompareImages"]:
        (metrics,) = entry["outputs"][compare_id]["metrics"]
        reference, candidate = (by_source[prompt[compare_id]["inputs"][k][0]] for k in ("reference", "candidate"))
        assert reference.shape == (PROXY_SIZE, PROXY_SIZE, 3)
        assert abs(np.abs(reference - candidate).mean() - metrics["mae_255"]) < 1.0
        cached = sampled_by(prompt, prompt[compare_id]["inputs"]["candidate"][0]) in branches["cached"]
        # Fewer steps differ from the full run too; by how much against the cache is what the template shows.
        assert 0 < metrics["mae_255"] < (8 if cached else math.inf), (cached, metrics)


# Trajectories whose residual changes are compared: classes of both schemes and of different shapes, and
# one class from two seeds (label, seed).
CONTENT_CASES = [(0, 0), (4, 0), (2, 0), (0, 1)]
# Measured on the proxy: step-by-step changes of two runs differ by 4.9-9.6% of their mean. (The split of
# each change into the latent's and the timestep's part is a measured figure, not a requirement:
# ``python tests/support/krea2_proxy_residuals.py --cases 0:0,4:0`` prints it.)
CONTENT_SPREAD = 0.02


@pytest.fixture(scope="module")
def residual_parts(comfy_root, proxy):
    """The first block's residual changes along uncached 8-step runs, split into the part due to the
    latent moving and the part due to the timestep alone (``krea2_proxy_residuals.residual_changes``)."""
    import json
    import subprocess

    from comfy_harness import comfyui_python
    from krea2_proxy_residuals import HERE

    cases = ",".join(f"{label}:{seed}" for label, seed in CONTENT_CASES)
    done = subprocess.run([comfyui_python(comfy_root), str(HERE), "--comfyui", str(comfy_root), "--cases", cases],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_residual_changes_depend_on_content(residual_parts):
    """Runs of different classes, and of one class from different seeds, change differently step by step."""
    curves = torch.tensor([row["changes"] for row in residual_parts])
    for i in range(len(curves)):
        for j in range(i + 1, len(curves)):
            relative = float((curves[i] - curves[j]).abs().mean() / curves[[i, j]].mean())
            assert relative > CONTENT_SPREAD, (residual_parts[i], residual_parts[j], relative)
