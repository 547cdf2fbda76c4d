"""Where the node's added host time goes: per model call and per run, by part, with direct timers.

The peer benchmark measures the node's own cost as a ratio of whole runs, which on a shared CPU
varies by several percent from run to run. This script says *what* that cost is made of. In one
process, ComfyUI's own sampler (``comfy.sample``) runs a Krea-2 model through the Cache-DiT node,
and timers wrap each part for the measured runs (and are removed after):

- the pack, per call: its DIFFUSION_MODEL wrapper with the call's routing and the text path's
  bookkeeping (everything between ComfyUI's ``forward`` and the model's ``_forward``, ComfyUI's
  wrapper executor included), its block pre-hooks, and its Fn hook with the diagnostics;
- cache-dit, per call: its patched ``forward`` (swapping the block list in), and its block-list
  wrapper less the blocks and the pack's hooks (its context checks and buffers, the Fn and Mn
  residuals, and torch's dispatch of the blocks' hooks);
- per run: opening the run (cache-dit enabled), closing it, building the record, publishing it.

The text path runs on every call (a pass-through ``model_function_wrapper`` turns its reuse
off), so a call's time is the model's full call, as without the node. On a GPU these parts are
host work that overlaps the device's, except after cache-dit's one read per decision; on a CPU
(this script, one thread) every microsecond is paid in full.

    python -m benchmarks.host_time                      # the trained proxy; 8 steps CFG 1 and 52 steps CFG 3.5
    python -m benchmarks.host_time --checkpoint x.safetensors --steps 8 --cfg 1 --runs 3 --json out.json
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import importlib
import json
import time
from pathlib import Path

SETTINGS = {  # the node's inputs over its defaults
    "caching off": {"residual_diff_threshold": 0.0},
    "defaults": {},
}
REGIMES = ((8, 1.0), (52, 3.5))


class Timers:
    """Nanoseconds and calls per part, from wrappers put on classes (and taken off) by ``installed``."""

    def __init__(self):
        self.ns: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()
        self._undo: list = []

    def wrap(self, owner, name: str, part: str):
        original = owner.__dict__[name]

        @functools.wraps(original)
        def timed(*args, **kwargs):
            start = time.perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                self.ns[part] += time.perf_counter_ns() - start
                self.calls[part] += 1

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))
        return timed

    def remove(self):
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


@contextlib.contextmanager
def timed_parts(node_model, krea2_model_module):
    """Timers on the model's calls, cache-dit's block wrapper and the pack's parts, while the block runs."""
    from cache_dit.caching.cache_blocks.pattern_3_4_5 import CachedBlocks_Pattern_3_4_5
    from devkit.comfy_harness import load_pack

    pack = load_pack().__name__   # the pack as ComfyUI imports it (a folder in custom_nodes)
    sampling_run = importlib.import_module(f"{pack}.adapters.sampling.sampling_run")
    block_probe = importlib.import_module(f"{pack}.adapters.dbcache.block_probe")
    wrappers = importlib.import_module(f"{pack}.nodes.wrappers")
    timers = Timers()
    model_class, block_class = krea2_model_module.SingleStreamDiT, krea2_model_module.SingleStreamBlock
    timers.wrap(model_class, "forward", "call")
    timers.wrap(model_class, "_forward", "model _forward")
    timers.wrap(block_class, "forward", "blocks")
    timers.wrap(CachedBlocks_Pattern_3_4_5, "forward", "cache-dit block wrapper")
    timers.wrap(block_probe.BlockProbe, "_before_block", "pack block hooks")
    timers.wrap(block_probe.BlockProbe, "_after_fn_blocks", "pack Fn hook and diagnostics")
    timers.wrap(sampling_run.SamplingRun, "__enter__", "open")   # a DBCache run's open and close (CacheRun's hooks)
    timers.wrap(sampling_run.SamplingRun, "__exit__", "close")
    timers.wrap(wrappers, "record_or_none", "record")
    timers.wrap(wrappers.routes, "publish", "publish")
    # The node's model holds the wrapper function itself: time that entry, and put it back after.
    untimed = wrappers.diffusion_model_wrapper
    timed_wrapper = timers.wrap(wrappers, "diffusion_model_wrapper", "pack call wrapper")
    wrapper_lists = [fns for by_key in node_model.wrappers.values() for key, fns in by_key.items()
                     if key == wrappers.KEY]
    originals = [list(fns) for fns in wrapper_lists]
    for fns in wrapper_lists:
        fns[:] = [timed_wrapper if f is untimed else f for f in fns]
    try:
        yield timers
    finally:
        for fns, before in zip(wrapper_lists, originals):
            fns[:] = before
        timers.remove()


def breakdown(timers: Timers, runs: int) -> dict:
    """Microseconds per call (and per run) of each part, from the timers of ``runs`` runs."""
    calls = timers.calls["call"] / runs
    per_call = lambda part: timers.ns[part] / runs / calls / 1e3  # noqa: E731
    pack_hooks = per_call("pack block hooks") + per_call("pack Fn hook and diagnostics")
    return {
        "calls_per_run": calls,
        "call_us": per_call("call"),
        "pack": {
            "call wrapper and routing": per_call("pack call wrapper") - per_call("model _forward"),
            "block hooks": per_call("pack block hooks"),
            "Fn hook and diagnostics": per_call("pack Fn hook and diagnostics"),
        },
        "cache-dit": {
            "forward patch": per_call("call") - per_call("pack call wrapper"),
            "block wrapper": per_call("cache-dit block wrapper") - per_call("blocks") - pack_hooks,
        },
        "per_run_us": {part: timers.ns[part] / runs / 1e3 for part in ("open", "close", "record", "publish")},
    }


def shares(result: dict) -> dict:
    """Each owner's added time as a share of a call, the per-run parts spread over the run's calls."""
    call = result["call_us"]
    per_run = sum(result["per_run_us"].values()) / result["calls_per_run"]
    return {"pack": sum(result["pack"].values()) / call, "cache-dit": sum(result["cache-dit"].values()) / call,
            "per run": per_run / call}


def measure(checkpoint: Path, steps: int, cfg: float, setting: str, runs: int) -> dict:
    """Sample ``runs`` times (after one warm-up run) with timers on; the breakdown of one case."""
    import torch

    import comfy.sample
    import comfy.sd
    import comfy.ldm.krea2.model as krea2_model
    from devkit.comfy_harness import load_pack
    from devkit.krea2_prompts import CACHE_NODE_DEFAULTS

    node = importlib.import_module(f"{load_pack().__name__}.nodes").Krea2CacheDiT
    # A model of its own per case: cache-dit keeps the ``forward`` it found at a module's first run, so a
    # module shared with an earlier case would still call that case's timers.
    model = comfy.sd.load_diffusion_model(str(checkpoint))
    text = model.model.diffusion_model.txtlayers * model.model.diffusion_model.txtdim
    context = torch.randn(1, 8, text, generator=torch.Generator().manual_seed(1))
    positive, negative = [[context, {}]], [[torch.zeros_like(context), {}]]
    latent = torch.zeros(1, 16, 16, 16)   # 128x128 pixels, as the proxy's images
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(0))
    full_text = model.clone()   # a pass-through model_function_wrapper: the text path runs on every call
    full_text.set_model_unet_function_wrapper(lambda apply, a: apply(a["input"], a["timestep"], **a["c"]))
    node.hidden = type("Hidden", (), {"unique_id": "host-time"})()
    node_model = node.execute(full_text, **{**CACHE_NODE_DEFAULTS, **SETTINGS[setting]}).args[0]

    def sample():
        comfy.sample.sample(node_model, noise, steps, cfg, "euler", "simple", positive, negative, latent,
                            disable_pbar=True, seed=0)

    # Timers on before the warm-up run: cache-dit keeps the ``forward`` it found at its first run.
    with timed_parts(node_model, krea2_model) as timers:
        sample()
        timers.ns.clear()
        timers.calls.clear()
        for _ in range(runs):
            sample()
    result = {"steps": steps, "cfg": cfg, "setting": setting, "runs": runs, **breakdown(timers, runs)}
    return {**result, "shares": shares(result)}


def report_lines(result: dict) -> list[str]:
    share = result["shares"]
    pack = ", ".join(f"{part} {us:.0f}" for part, us in result["pack"].items())
    cache_dit = ", ".join(f"{part} {us:.0f}" for part, us in result["cache-dit"].items())
    per_run = ", ".join(f"{part} {us / 1e3:.2f}" for part, us in result["per_run_us"].items())
    return [f"{result['steps']} steps, CFG {result['cfg']:g}, {result['setting']}: "
            f"{result['calls_per_run']:.0f} calls per run, {result['call_us'] / 1e3:.1f} ms per call",
            f"  the pack, us per call: {pack}  ({share['pack']:.1%} of a call)",
            f"  cache-dit, us per call: {cache_dit}  ({share['cache-dit']:.1%})",
            f"  per run, ms: {per_run}  ({share['per run']:.1%} of a call, spread over the run)"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a native Krea-2 checkpoint (default: the trained proxy)")
    parser.add_argument("--steps", type=int, help="one regime: this many steps (with --cfg)")
    parser.add_argument("--cfg", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=10, help="timed runs per case")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"of {', '.join(SETTINGS)}")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    from devkit.comfy_harness import find_comfyui, use_comfyui_in_process

    comfy_root = find_comfyui()
    if comfy_root is None:
        raise SystemExit("This benchmark needs ComfyUI (set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI).")
    unknown = set(args.settings.split(",")) - set(SETTINGS)
    if unknown:
        parser.error(f"--settings: unknown {sorted(unknown)}; choose from {sorted(SETTINGS)}")
    if args.checkpoint:
        checkpoint = Path(args.checkpoint).resolve()
    else:
        from devkit.krea2_proxy import ensure_proxy

        checkpoint = ensure_proxy(comfy_root).checkpoint
    use_comfyui_in_process(comfy_root)
    import torch

    torch.set_num_threads(1)
    regimes = [(args.steps, args.cfg)] if args.steps else REGIMES
    results = []
    for steps, cfg in regimes:
        for setting in args.settings.split(","):
            results.append(measure(checkpoint, steps, cfg, setting, args.runs))
            print("\n".join(report_lines(results[-1])), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, allow_nan=False))


if __name__ == "__main__":
    main()
