"""Krea-2 Cache-DiT against ComfyUI's own step caches, EasyCache and LazyCache: image quality at equal speed.

Samples the small trained Krea-2 proxies through the real ComfyUI server on the CPU with this pack's
node, with ComfyUI's ``EasyCache`` and ``LazyCache``, and plainly at fewer steps (euler, and ComfyUI's
multistep samplers), the same seeds and graphs side by side in one run, Turbo-like (8 steps, CFG 1, on
the Turbo proxy distilled for it) and Raw-like (52 steps, CFG 3.5, cond and uncond batched, on the
trained proxy). Per regime, at each peer setting: the node
setting with the lowest MAE among those at least as fast (within 5%); at each node and peer setting
that skips work: fewer steps at its speed (euler's curve, the nearest multistep sampler as fast); then
the targets as ``check:`` lines (the node's own cost from ``--own-cost-repeats``
interleaved repeats after the table). It writes ``peers.json`` and ``peers.png`` (MAE against
speedup, one curve per method) to ``benchmarks/results/`` and prints the table as Markdown. A small
model on procedural images: figures of **dynamics on the proxy, not Krea-2 quality**. The cases,
the figures and how they are judged: docs/benchmarks.md, "Against EasyCache and LazyCache".

    python -m benchmarks.peers                 # the full run (about 20 minutes on one CPU thread)
    python -m benchmarks.peers --quick         # a handful of Turbo-like cases, to see it work
    python -m benchmarks.peers --replot        # the written table compared and plotted again
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

# The parts are the package peers/ beside this script (benchmarks/peers/): run by path, this script
# is __main__, and the name peers is the package's (peers/__init__.py says why the two coexist).
from benchmarks.peers.cases import IMAGES, REGIMES, full_cases, quick_cases
from benchmarks.peers.report import conditions, report
from benchmarks.peers.runner import OWN_COST_PAIRS, measure, measure_own_cost

from devkit.comfy_harness import ComfyServer, find_comfyui, load_pack
from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

BENCH_DIR = Path(__file__).resolve().parent

RESULTS_DIR = BENCH_DIR / "results"


def model_checkpoints(proxy, turbo_proxy) -> dict[str, Path]:
    """The checkpoint behind each model file name a regime samples (``cases.Regime.model``): the trained
    proxy (Raw-like) and the Turbo proxy distilled from it (Turbo-like). The images of every regime are
    decoded with the proxy's decoder (the Turbo proxy shares its codec: one latent space)."""
    return {PROXY_MODEL: proxy.checkpoint, TURBO_PROXY_MODEL: turbo_proxy.checkpoint}


def link_models(base: Path, cases, checkpoints: dict) -> None:
    for model in sorted({c.model for c in cases}):
        if model not in checkpoints:
            raise SystemExit(f"no checkpoint for the model {model!r} a regime samples: add it to model_checkpoints")
        (base / "models" / "diffusion_models" / model).symlink_to(checkpoints[model])


def run(args) -> tuple[list[dict], dict]:
    comfy_root = find_comfyui()
    if comfy_root is None:
        raise SystemExit("This benchmark needs ComfyUI (set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI).")
    if args.threads:
        # The server inherits it: torch reads it at start-up for its intra-op threads.
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    load_pack()
    from devkit.krea2_proxy import ensure_proxy
    from devkit.krea2_turbo_proxy import ensure_turbo_proxy

    proxy, turbo_proxy = ensure_proxy(comfy_root), ensure_turbo_proxy(comfy_root)
    cases = quick_cases() if args.quick else full_cases(tuple(args.regimes.split(",")))
    images = IMAGES[:args.images]
    base = ComfyServer.prepare_base_dir(Path(tempfile.mkdtemp(prefix="krea2_peers_")))
    link_models(base, cases, model_checkpoints(proxy, turbo_proxy))
    server = ComfyServer(comfy_root, base).start()
    try:
        progress = lambda text: print(text, flush=True)  # noqa: E731
        rows = measure(server, cases, images, args.repeats, proxy.decode, progress=progress)
        own_cost = measure_own_cost(server, cases, images, args.own_cost_repeats, progress) \
            if args.own_cost_repeats else None
    finally:
        server.stop()
    info = conditions(comfy_root, proxy, images, args.repeats, os.environ.get("OMP_NUM_THREADS"), turbo_proxy)
    # A quick run never replaces the full run's figures.
    return report(rows, info, Path(args.out), stem="peers_quick" if args.quick else "peers", own_cost=own_cost)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--images", type=int, default=3, choices=range(1, len(IMAGES) + 1),
                        help="how many of the (class, seed) images each repeat samples")
    parser.add_argument("--regimes", default=",".join(REGIMES), help="turbo, raw or both (comma-separated)")
    parser.add_argument("--quick", action="store_true",
                        help="a handful of Turbo-like cases (what the test tier runs), written as peers_quick.*")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads of the server (OMP_NUM_THREADS; 0 leaves it alone); one thread keeps "
                             "timings steady on a shared machine")
    parser.add_argument("--own-cost-repeats", type=int, default=OWN_COST_PAIRS,
                        help="interleaved repeats of no node / caching off / caching off with the text path on "
                             "every call, after the table, that decide the node's own cost (0: none)")
    parser.add_argument("--out", default=str(RESULTS_DIR), help="folder for peers.json and peers.png")
    parser.add_argument("--replot", action="store_true",
                        help="sample nothing: read the rows of --out's peers.json, compare, plot and print again")
    args = parser.parse_args(argv)
    if args.replot:
        written = json.loads((Path(args.out) / "peers.json").read_text())
        if not all("times" in row for row in written["rows"]):
            parser.error("--replot: this peers.json predates the per-repeat times its checks pair; run the "
                         "benchmark again")
        report(written["rows"], written["conditions"], Path(args.out), own_cost=written.get("own_cost"))
        return
    unknown = set(args.regimes.split(",")) - set(REGIMES)
    if unknown:
        parser.error(f"--regimes: unknown {sorted(unknown)}; choose from {sorted(REGIMES)}")
    run(args)


if __name__ == "__main__":
    main()
