"""The generated-checkpoint cache (``devkit/checkpoint_cache.py``): a checkpoint is drawn once per label and
key, copied after, never shared with the file a test holds, and a generator's draw is the same every time
(what makes a cached file stand for a fresh one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.checkpoint_cache import CACHE_ENV, cache_key, cached_checkpoint, checkpoint_cache


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return checkpoint_cache()


def drawer(draws: list, content: bytes):
    def make(out: Path):
        draws.append(out)
        out.write_bytes(content)
    return make


def test_a_checkpoint_is_drawn_once_then_copied(cache, tmp_path):
    draws = []
    first = cached_checkpoint(tmp_path / "a" / "m.safetensors", "m", "k1", drawer(draws, b"weights"))
    second = cached_checkpoint(tmp_path / "b" / "m.safetensors", "m", "k1", drawer(draws, b"other"))
    assert len(draws) == 1 and first.read_bytes() == second.read_bytes() == b"weights"
    assert [p.name for p in cache.iterdir()] == ["m-k1.safetensors"]


def test_writing_over_a_copy_leaves_the_cache_alone(cache, tmp_path):
    path = cached_checkpoint(tmp_path / "m.safetensors", "m", "k1", drawer([], b"weights"))
    path.write_bytes(b"changed by a test")
    again = cached_checkpoint(tmp_path / "n.safetensors", "m", "k1", drawer([], b"never drawn"))
    assert again.read_bytes() == b"weights"


def test_a_new_key_replaces_the_labels_older_file_and_keeps_other_labels(cache, tmp_path):
    cached_checkpoint(tmp_path / "m.safetensors", "m", "k1", drawer([], b"one"))
    cached_checkpoint(tmp_path / "m_low.safetensors", "m_low", "k1", drawer([], b"low"))
    path = cached_checkpoint(tmp_path / "m2.safetensors", "m", "k2", drawer([], b"two"))
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in cache.iterdir()) == ["m-k2.safetensors", "m_low-k1.safetensors"]


def test_a_draw_that_fails_leaves_nothing_cached(cache, tmp_path):
    def broken(out: Path):
        out.write_bytes(b"half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        cached_checkpoint(tmp_path / "m.safetensors", "m", "k1", broken)
    assert list(cache.iterdir()) == []
    assert cached_checkpoint(tmp_path / "m.safetensors", "m", "k1", drawer([], b"whole")).read_bytes() == b"whole"


def test_the_key_covers_every_part_and_their_order():
    assert cache_key("script", "wan", "0") != cache_key("script", "wan", "1")
    assert cache_key("ab", "c") != cache_key("a", "bc")
    assert cache_key("script", "wan", "0") == cache_key("script", "wan", "0")


@pytest.mark.comfyui
def test_a_family_generator_draws_the_same_file_every_time(comfy_root, tmp_path, monkeypatch):
    from devkit.comfy_models import make_family_checkpoint

    files = []
    for name in ("one", "two"):   # two empty caches: each draws anew
        monkeypatch.setenv(CACHE_ENV, str(tmp_path / f"cache_{name}"))
        files.append(make_family_checkpoint(comfy_root, "wan", tmp_path / name / "wan.safetensors", seed=1))
    assert files[0].read_bytes() == files[1].read_bytes()
    [cached] = (tmp_path / "cache_two").iterdir()
    assert cached.name.startswith("wan-s1-") and cached.read_bytes() == files[1].read_bytes()
