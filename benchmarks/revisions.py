"""Two checkouts of the pack side by side in one run: the same proxy graphs timed through each, interleaved.

What a change to the per-call path costs (or saves) is a few percent, below what two separate runs
on a shared CPU agree to. Here one ComfyUI server per checkout (each with only that checkout in its
``custom_nodes``) samples the trained proxy, the servers taking turns repeat by repeat and the order
flipped every other repeat, so drift hits both alike; per case the median per-repeat ratio of the
two checkouts' times, with its 95% confidence interval (``spread.median_interval``), and each
checkout's own ratio over the graph without the node. Only one server samples at a time.

    python -m benchmarks.revisions --before /path/to/older/checkout            # this checkout is "after"
    python -m benchmarks.revisions --before A --after B --repeats 30 --json out.json

The proxy's dynamics are not Krea-2's; these are timings of the pack's own work on a small model,
where that work weighs most.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.speedup import OFF, run_prompt
from benchmarks.spread import CONFIDENCE, median_interval, paired_ratios

from devkit.comfy_harness import PACK_DIR_NAME, ComfyServer, find_comfyui
from devkit.krea2_prompts import PROXY_MODEL, proxy_prompt

BENCH_DIR = Path(__file__).resolve().parent

# (name, steps, cfg, the DBCache node's inputs; None: the graph without the node)
CASES = (("no node", 8, 1.0, None), ("caching off", 8, 1.0, OFF), ("steps_mask fast", 8, 1.0, {"steps_mask": "fast"}),
         ("raw no node", 52, 3.5, None), ("raw caching off", 52, 3.5, OFF),
         ("raw steps_mask medium", 52, 3.5, {"steps_mask": "medium"}))


def start_server(checkout: Path, comfy_root: Path, checkpoint: Path) -> ComfyServer:
    base = ComfyServer.prepare_base_dir(Path(tempfile.mkdtemp(prefix="krea2_revision_")), link_pack=False)
    (base / "custom_nodes" / PACK_DIR_NAME).symlink_to(checkout.resolve(), target_is_directory=True)
    (base / "models" / "diffusion_models" / PROXY_MODEL).symlink_to(checkpoint)
    return ComfyServer(comfy_root, base).start()


def time_case(server: ComfyServer, case: tuple, seed: int) -> float:
    name, steps, cfg, cache = case
    prompt = proxy_prompt(label=seed % 8, cfg=cfg, steps=steps, cache=cache, seed=seed,
                          prefix=f"rev_{name.replace(' ', '_')}")
    return run_prompt(server, prompt).seconds


def measure(servers: dict[str, ComfyServer], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Per checkout and case, one time per repeat (after one warm-up run of each)."""
    times = {label: {case[0]: [] for case in CASES} for label in servers}
    for label, server in servers.items():
        for case in CASES:
            time_case(server, case, seed=10_000)
    order = list(servers)
    for repeat in range(repeats):
        for label in (order if repeat % 2 == 0 else order[::-1]):
            for case in (CASES if repeat % 2 == 0 else CASES[::-1]):
                times[label][case[0]].append(time_case(servers[label], case, seed=repeat))
        print(f"repeat {repeat + 1}/{repeats}", flush=True)
    return times


def report(times: dict[str, dict[str, list[float]]]) -> list[str]:
    before, after = times["before"], times["after"]
    lines = [f"| case | after / before ({CONFIDENCE:.0%} interval) | before over no node | after over no node |",
             "|---|---|---|---|"]
    for name, *_ in CASES:
        plain = "raw no node" if name.startswith("raw ") else "no node"
        ratio = median_interval(paired_ratios(after[name], before[name]))
        own = [median_interval(paired_ratios(t[name], t[plain])).median for t in (before, after)]
        lines.append(f"| {name} | {ratio.median:.3f} ({ratio.low:.3f} to {ratio.high:.3f}) | {own[0]:.3f} | "
                     f"{own[1]:.3f} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="a checkout of the pack (the older one)")
    parser.add_argument("--after", default=str(BENCH_DIR.parent), help="a checkout of the pack (default: this one)")
    parser.add_argument("--repeats", type=int, default=20, help="interleaved repeats (at least 6)")
    parser.add_argument("--json", help="also write the per-repeat times here")
    args = parser.parse_args(argv)
    if args.repeats < 6:
        parser.error("--repeats: at least 6 (a median's confidence interval needs them)")
    comfy_root = find_comfyui()
    if comfy_root is None:
        raise SystemExit("This benchmark needs ComfyUI (set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI).")
    from devkit.krea2_proxy import ensure_proxy

    checkpoint = ensure_proxy(comfy_root).checkpoint
    servers = {label: start_server(Path(path), comfy_root, checkpoint)
               for label, path in (("before", args.before), ("after", args.after))}
    try:
        times = measure(servers, args.repeats)
    finally:
        for server in servers.values():
            server.stop()
    print("\n".join(report(times)))
    if args.json:
        Path(args.json).write_text(json.dumps(times, indent=1, allow_nan=False))


if __name__ == "__main__":
    main()
