"""Another step cache on the same model call path.

Two step caches on one model cannot both work: each decides per step whether
to run the model, and the other one's skipped calls look, to each, like steps
it computed or steps that never came. So a run with another step cache is left
uncached, with a warning naming it.

Two ways to see one:
- before the run, by its state (here): ComfyUI's EasyCache and LazyCache keep
  their holder in ``transformer_options["easycache"]`` (with a ``name``) and
  register their wrappers under the keys "easycache" / "lazycache";
- during the run, by its effect (``adapters/sampling/foreign_serves.py``): a call
  cache-dit served whose transformer blocks never ran was answered by something
  between the call and the model.
"""

from __future__ import annotations

from collections.abc import Iterable

# Wrapper keys of known step caches -> the node a user sees.
KNOWN_WRAPPER_KEYS = {"easycache": "EasyCache", "lazycache": "LazyCache"}
HOLDER_OPTION = "easycache"  # where EasyCache and LazyCache keep their state in transformer_options


def other_step_cache(transformer_options: dict | None, wrapper_keys: Iterable[str] = ()) -> str | None:
    """The name of another step cache on this model's call path, or None."""
    holder = (transformer_options or {}).get(HOLDER_OPTION)
    if holder is not None:
        return str(getattr(holder, "name", None) or "EasyCache")
    for key in wrapper_keys:
        if isinstance(key, str) and key.lower() in KNOWN_WRAPPER_KEYS:
            return KNOWN_WRAPPER_KEYS[key.lower()]
    return None


def refusal(other: str) -> str:
    """The warning for a run left uncached because ``other`` caches steps of the same model."""
    return (f"{other} also caches steps of this model: two step caches on one model give wrong images and "
            f"wrong stats, so this run was not cached by Cache-DiT (the image is {other}'s alone). "
            f"Use one step cache: bypass {other} or this node.")
