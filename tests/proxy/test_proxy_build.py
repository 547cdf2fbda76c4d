"""The proxies' builds: the build id follows what decides the weights, a pinned build is taken only when
its weights are the ones its record names, and the three recipes still build (a few iterations each)."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest
import torch
from devkit import krea2_proxy, krea2_turbo_proxy, proxy_build
from devkit import flux_proxy as flux_recipe   # the name flux_proxy is the built proxy's fixture
from devkit.comfy_harness import REPO_ROOT, comfyui_python
from safetensors import safe_open
from safetensors.torch import save_file


def _recipe_of(path):
    return proxy_build.recipe_hash(path, krea2_proxy.NOT_RECIPE, dataclasses.asdict(krea2_proxy.SETTINGS))


def _edited_builder(tmp_path, name, old, new):
    source = krea2_proxy.HERE.read_text()
    assert old in source, old
    path = tmp_path / name
    path.write_text(source.replace(old, new, 1))
    return path


def test_the_build_id_ignores_docstrings_comments_imports_and_plumbing(tmp_path):
    baseline = _recipe_of(krea2_proxy.HERE)
    unchanged = {
        "docstring": ('"""A small trained Krea-2 ("the proxy")', '"""A reworded summary of the small proxy ("the proxy")'),
        "comment": ("# The objects: radius as a share", "# Reworded: radius as a share"),
        "import": ("import dataclasses\n", "import dataclasses\nimport textwrap\n"),
        "plumbing": ('build_main(argv, "Krea-2 proxy"', 'build_main(argv, "The Krea-2 proxy"'),
        "function docstring": ('"""Images (B, 3, size, size) in [0, 1]', '"""Reworded: images (B, 3, size, size) in [0, 1]'),
    }
    for what, (old, new) in unchanged.items():
        assert _recipe_of(_edited_builder(tmp_path, f"{what.replace(' ', '_')}.py", old, new)) == baseline, what


def test_the_build_id_follows_the_data_the_training_and_the_settings(tmp_path):
    baseline = _recipe_of(krea2_proxy.HERE)
    changed = {
        "data": ("low, high = 0.15 + 0.35 * u[:, 1]", "low, high = 0.2 + 0.35 * u[:, 1]"),
        "training": ("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
                     "torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)"),
        "a setting's default": ("iterations: int = 1100", "iterations: int = 1200"),
    }
    for what, (old, new) in changed.items():
        assert _recipe_of(_edited_builder(tmp_path, f"{what[:4]}.py", old, new)) != baseline, what
    other = dataclasses.asdict(dataclasses.replace(krea2_proxy.SETTINGS, seed=2))
    assert proxy_build.recipe_hash(krea2_proxy.HERE, krea2_proxy.NOT_RECIPE, other) != baseline


def test_a_pinned_recipe_keeps_its_build_id_and_a_new_recipe_gets_its_own():
    for kind, pin in proxy_build.PINS.items():
        assert proxy_build.build_id(kind, pin["recipe"]) == pin["build_id"]
        assert proxy_build.build_id(kind, "0123456789abcdef") == "0123456789abcdef"
    assert krea2_proxy.cache_dir().name == f"proxy-{krea2_proxy.build_id()}"
    assert krea2_turbo_proxy.cache_dir().name == f"turbo-proxy-{krea2_turbo_proxy.build_id()}"
    # The student's recipe holds its teacher's build id: a new teacher, a new student.
    student = dataclasses.asdict(krea2_turbo_proxy.SETTINGS)
    ids = {proxy_build.recipe_hash(krea2_turbo_proxy.HERE, krea2_turbo_proxy.NOT_RECIPE, student, teacher)
           for teacher in ("teacher-a", "teacher-b")}
    assert len(ids) == 2


def test_the_flux_proxys_build_id_covers_the_data_set_it_shares_with_the_krea2_proxy(tmp_path, monkeypatch):
    """The Flux proxy trains on the Krea-2 proxy's data set and codec: a change there is a new Flux build,
    a docstring there is not."""
    baseline = flux_recipe.build_id()
    assert flux_recipe.cache_dir().name == f"flux-proxy-{baseline}"
    reworded = _edited_builder(tmp_path, "reworded.py", '"""Images (B, 3, size, size) in [0, 1]', '"""Images, reworded')
    monkeypatch.setattr(krea2_proxy, "__file__", str(reworded))
    assert flux_recipe.build_id() == baseline
    other_data = _edited_builder(tmp_path, "data.py", "low, high = 0.15 + 0.35 * u[:, 1]", "low, high = 0.2 + 0.35 * u[:, 1]")
    monkeypatch.setattr(krea2_proxy, "__file__", str(other_data))
    assert flux_recipe.build_id() != baseline


def _a_build(folder, checkpoint_name="model.safetensors"):
    folder.mkdir(parents=True)
    save_file({"weight": torch.arange(12, dtype=torch.float32).reshape(3, 4)}, str(folder / checkpoint_name))
    info = {"generator_hash": folder.name.split("-")[-1],
            "weights_sha256": proxy_build.weights_sha256(folder / checkpoint_name)}
    (folder / proxy_build.BUILD_INFO_NAME).write_text(json.dumps(info))
    return info


def test_a_pinned_build_is_copied_into_the_cache_when_its_weights_check_out(tmp_path, monkeypatch):
    monkeypatch.setenv(proxy_build.PINNED_ENV, str(tmp_path / "pinned"))
    pinned = tmp_path / "pinned" / "proxy-00aa11bb22cc33dd"
    info = _a_build(pinned)
    (pinned / "model.safetensors").chmod(0o444)     # pins are read-only; the cached copy must not be
    folder = tmp_path / "cache" / pinned.name
    said = []
    assert proxy_build.take_pinned(folder, "model.safetensors", said.append)
    assert proxy_build.is_built(folder)
    assert proxy_build.weights_sha256(folder / "model.safetensors") == info["weights_sha256"]
    assert (folder / "model.safetensors").stat().st_mode & 0o200
    assert said == [f"Pinned build taken: {pinned} -> {folder}"]
    assert not list(folder.parent.glob("*.partial-*"))


def test_a_pinned_build_whose_weights_differ_from_its_record_is_ignored_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(proxy_build.PINNED_ENV, str(tmp_path / "pinned"))
    pinned = tmp_path / "pinned" / "proxy-00aa11bb22cc33dd"
    _a_build(pinned)
    save_file({"weight": torch.zeros(3, 4)}, str(pinned / "model.safetensors"))   # other weights, same record
    folder = tmp_path / "cache" / pinned.name
    said = []
    assert not proxy_build.take_pinned(folder, "model.safetensors", said.append)
    assert not folder.exists()
    assert len(said) == 1 and "ignored" in said[0] and "sha256" in said[0] and str(pinned) in said[0]
    # No folder of that build at all: nothing to say, the build runs.
    assert not proxy_build.take_pinned(tmp_path / "cache" / "proxy-ffffffffffffffff", "model.safetensors", said.append)
    assert len(said) == 1


def test_the_pins_name_the_pinned_folders_beside_the_clone():
    root = proxy_build.pinned_root()
    if not root.is_dir():
        pytest.skip(f"no pinned builds at {root}")
    for kind, pin in proxy_build.PINS.items():
        folder = root / f"{kind}-{pin['build_id']}"
        assert folder.is_dir(), folder
        assert json.loads((folder / proxy_build.BUILD_INFO_NAME).read_text())["weights_sha256"] == pin["weights_sha256"]


def _native_shapes(path):
    with safe_open(str(path), "pt") as checkpoint:
        return {name: tuple(checkpoint.get_slice(name).get_shape()) for name in checkpoint.keys()}


@pytest.mark.tier("proxy")
def test_every_recipe_still_builds_in_a_few_iterations(comfy_root, tmp_path, proxy, flux_proxy):
    """The recipes run end to end as a full build does (data, codec, training, the teacher's trajectories,
    distillation, the held-out check, the build record), cut to a few iterations and trajectories."""
    python = comfyui_python(comfy_root)
    run = dict(cwd=REPO_ROOT, check=True, capture_output=True, text=True, timeout=600)
    subprocess.run([python, "-m", "devkit.krea2_proxy", "build", "--comfyui", str(comfy_root),
                    "--out", str(tmp_path / "proxy"), "--iterations", "2"], **run)
    tiny = ["--set", "iterations=2", "--set", "trajectories=1", "--set", "held_out=1", "--set", "teacher_batch=1"]
    subprocess.run([python, "-m", "devkit.krea2_turbo_proxy", "build", "--comfyui", str(comfy_root),
                    "--out", str(tmp_path / "turbo"), *tiny], **run)
    subprocess.run([python, "-m", "devkit.flux_proxy", "build", "--comfyui", str(comfy_root),
                    "--out", str(tmp_path / "flux"), "--iterations", "2"], **run)
    for folder, name, built in ((tmp_path / "proxy", krea2_proxy.CHECKPOINT_NAME, proxy),
                                (tmp_path / "turbo", krea2_turbo_proxy.CHECKPOINT_NAME, proxy),
                                (tmp_path / "flux", flux_recipe.CHECKPOINT_NAME, flux_proxy)):
        info = json.loads((folder / proxy_build.BUILD_INFO_NAME).read_text())
        assert info["weights_sha256"] == proxy_build.weights_sha256(folder / name)
        assert _native_shapes(folder / name) == _native_shapes(built.checkpoint)
    assert (tmp_path / "proxy" / krea2_proxy.CODEC_NAME).is_file()
    assert (tmp_path / "flux" / flux_recipe.CODEC_NAME).is_file()
    held_out = json.loads((tmp_path / "flux" / proxy_build.BUILD_INFO_NAME).read_text())["held_out"]
    assert held_out["samples"] == len(krea2_proxy.CLASSES) * len(flux_recipe.HELD_OUT.seeds)
