"""Another step cache on the same model call path.

Two step caches on one model cannot both work: each decides per step whether
to run the model, and the other one's skipped calls look, to each, like steps
it computed or steps that never came. So a run with another step cache is left
uncached, with a warning naming it.

Two ways to see one:
- before the run, by its state: ComfyUI's EasyCache and LazyCache keep their
  holder in ``transformer_options["easycache"]`` (with a ``name``) and register
  their wrappers under the keys "easycache" / "lazycache";
- during the run, by its effect: a call cache-dit served whose transformer
  blocks never ran was answered by something between the call and the model
  (cache-dit itself always runs the first ``Fn`` blocks).
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


class ForeignServeWatch:
    """Notices calls cache-dit served whose blocks never ran: another cache answered them."""

    def __init__(self):
        self.first_step: int | None = None
        self.calls = 0

    @property
    def seen(self) -> bool:
        return self.first_step is not None

    def observe(self, step: int, served: bool, blocks_run: int) -> bool:
        """Record one call; True when something other than the model answered it."""
        if not served or blocks_run > 0:
            return False
        if self.first_step is None:
            self.first_step = step
        self.calls += 1
        return True

    def warning(self) -> str | None:
        if not self.seen:
            return None
        return (f"From step {self.first_step} on, model calls returned without running a transformer "
                f"block: another step cache on this model's call path answered them, so from then on this run "
                f"was not cached and its cached steps count only what cache-dit served. Use one step cache: "
                f"bypass the other cache node or this node.")
