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

The Flux regimes (``--regimes flux20,flux28``: 20 and 28 steps at CFG 3.5 on the small trained Flux,
devkit/flux_proxy.py) run apart from the Krea-2 ones and write ``peers_flux.json`` and ``peers_flux.png``:
the same columns, plus the Forecast node's ``auto``; not projected on Krea-2, not held to Krea-2's targets.

    python -m benchmarks.peers                 # the full run (about 20 minutes on one CPU thread)
    python -m benchmarks.peers --quick         # a handful of Turbo-like cases, to see it work
    python -m benchmarks.peers --replot        # the written table compared and plotted again
    python -m benchmarks.peers --regimes flux20,flux28   # the Flux proxy's run
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

# The parts are the package peers/ beside this script (benchmarks/peers/): run by path, this script
# is __main__, and the name peers is the package's (peers/__init__.py says why the two coexist).
from benchmarks.peers.cases import FLUX, IMAGES, KREA2, REGIMES, full_cases, quick_cases
from benchmarks.peers.report import conditions, report
from benchmarks.peers.runner import OWN_COST_PAIRS, measure, measure_own_cost

from devkit.comfy_harness import ComfyServer, find_comfyui, load_pack
from devkit.krea2_prompts import FLUX_PROXY_MODEL, PROXY_MODEL, TURBO_PROXY_MODEL

BENCH_DIR = Path(__file__).resolve().parents[1]   # benchmarks/, this package's parent

RESULTS_DIR = BENCH_DIR / "results"
# Each family's run writes its own results: a Flux run never replaces the Krea-2 figures.
STEMS = {KREA2: "peers", FLUX: "peers_flux"}


def ensure_builds(comfy_root: Path, models: set[str]) -> dict:
    """The build behind each model file name the cases sample (``cases.Regime.model``), built or taken from the
    cache only when a case samples it: the trained proxy (Raw-like) and the Turbo proxy distilled from it
    (Turbo-like; the two come together, the Turbo proxy sharing the proxy's codec), the Flux proxy (Flux)."""
    builds = {}
    if models & {PROXY_MODEL, TURBO_PROXY_MODEL}:
        from devkit.krea2_proxy import ensure_proxy
        from devkit.krea2_turbo_proxy import ensure_turbo_proxy

        builds[PROXY_MODEL], builds[TURBO_PROXY_MODEL] = ensure_proxy(comfy_root), ensure_turbo_proxy(comfy_root)
    if FLUX_PROXY_MODEL in models:
        from devkit.flux_proxy import ensure_flux_proxy

        builds[FLUX_PROXY_MODEL] = ensure_flux_proxy(comfy_root)
    return builds


def model_checkpoints(builds: dict) -> dict[str, Path]:
    return {model: built.checkpoint for model, built in builds.items()}


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
    cases = quick_cases() if args.quick else full_cases(args.regimes)
    builds = ensure_builds(comfy_root, {c.model for c in cases})
    images = IMAGES[:args.images]
    base = ComfyServer.prepare_base_dir(Path(tempfile.mkdtemp(prefix="krea2_peers_")))
    link_models(base, cases, model_checkpoints(builds))
    server = ComfyServer(comfy_root, base).start()
    try:
        progress = lambda text: print(text, flush=True)  # noqa: E731
        decoders = {model: built.decode for model, built in builds.items()}
        rows = measure(server, cases, images, args.repeats, decoders, progress=progress)
        own_cost = measure_own_cost(server, cases, images, args.own_cost_repeats, progress) \
            if args.own_cost_repeats else None
    finally:
        server.stop()
    info = conditions(comfy_root, builds.get(PROXY_MODEL), images, args.repeats, os.environ.get("OMP_NUM_THREADS"),
                      builds.get(TURBO_PROXY_MODEL), builds.get(FLUX_PROXY_MODEL),
                      regimes=tuple(dict.fromkeys(c.regime for c in cases)))
    # A quick run never replaces the full run's figures.
    return report(rows, info, Path(args.out), stem="peers_quick" if args.quick else stem(args.regimes),
                  own_cost=own_cost)


def stem(regimes: tuple[str, ...]) -> str:
    return STEMS[REGIMES[regimes[0]].family]   # main() keeps one family per run


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--images", type=int, default=3, choices=range(1, len(IMAGES) + 1),
                        help="how many of the (class, seed) images each repeat samples")
    parser.add_argument("--regimes", default="turbo,raw",
                        help="turbo, raw or both (comma-separated; written as peers.*), or flux20, flux28 or both "
                             "(the Flux proxy, written as peers_flux.*); a run takes one family")
    parser.add_argument("--quick", action="store_true",
                        help="a handful of Turbo-like cases (what the test tier runs), written as peers_quick.*")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads of the server (OMP_NUM_THREADS; 0 leaves it alone); one thread keeps "
                             "timings steady on a shared machine")
    parser.add_argument("--own-cost-repeats", type=int, default=OWN_COST_PAIRS,
                        help="interleaved repeats of no node / caching off / caching off with the text path on "
                             "every call, after the table, that decide the node's own cost (0: none)")
    parser.add_argument("--out", default=str(RESULTS_DIR), help="folder for peers.json (peers_flux.json) and the plot")
    parser.add_argument("--replot", action="store_true",
                        help="sample nothing: read the rows of --out's peers.json (peers_flux.json with the Flux "
                             "regimes), compare, plot and print again")
    args = parser.parse_args(argv)
    args.regimes = tuple(args.regimes.split(","))
    unknown = set(args.regimes) - set(REGIMES)
    if unknown:
        parser.error(f"--regimes: unknown {sorted(unknown)}; choose from {sorted(REGIMES)}")
    if len({REGIMES[name].family for name in args.regimes}) > 1:
        parser.error("--regimes: run the Krea-2 regimes (turbo, raw) and the Flux ones (flux20, flux28) apart: "
                     "each family writes its own results")
    if args.replot:
        written = json.loads((Path(args.out) / f"{stem(args.regimes)}.json").read_text())
        if not all("times" in row for row in written["rows"]):
            parser.error("--replot: this peers.json predates the per-repeat times its checks pair; run the "
                         "benchmark again")
        report(written["rows"], written["conditions"], Path(args.out), stem=stem(args.regimes),
               own_cost=written.get("own_cost"))
        return
    run(args)


if __name__ == "__main__":
    main()
