"""What a peer-benchmark run leaves: the JSON and the plot, and the printed table, verdicts and checks.

The rows are compared on the measured wall clock and, when Krea-2's component costs are measured
(krea2_costs.py) and every row samples a Krea-2 proxy, on the speedup projected onto Krea-2
(projection.py) as well; the Flux proxy's rows are not projected (Krea-2's costs are not Flux's).
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from .cases import (CACHING_OFF_FULL_TEXT, FLUX, KREA2, REGIMES, families,  # first: its speedup import loads the pack
                    is_node_default, regimes_of)
from .checks import target_checks
from .compare import fewer_steps_lines, head_to_head, verdict_lines
from .plot import plot
from benchmarks import krea2_costs
from benchmarks.projection import add_projection

from krea2_cachedit.adapters.record.strict_json import dumps as strict_json

COSTS = krea2_costs.RESULTS   # Krea-2's component costs at real size, for the projection


def markdown_table(rows: list[dict]) -> str:
    projected = all("projected" in r for r in rows)
    lines = ["| steps, CFG | method | setting | cached/skipped | s/run | ideal | wall-clock | wall/ideal | MAE/255 | PSNR dB |"
             + (" projected on Krea-2 |" if projected else ""),
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if projected else "")]
    for r in rows:
        low, high = r["skipped_range"]
        skipped = f"{low}/{r['steps']}" if low == high else f"{low}-{high}/{r['steps']}"
        psnr = "identical" if r["psnr_db"] is None else f"{r['psnr_db']:.1f}"
        setting = r["setting"] + (" (defaults)" if is_node_default(r) else "")
        lines.append(f"| {r['steps']}, {r['cfg']:g} | {r['method']} | {setting} | {skipped} | {r['seconds']:.3f} | "
                     f"{r['ideal']:.2f}x | {r['wall']:.2f}x | {r['wall'] / r['ideal']:.0%} | {r['mae_255']:.2f} | {psnr} |"
                     + (f" {r['projected']:.2f}x |" if projected else ""))
    return "\n".join(lines)


NOTES = {KREA2: "small trained Krea-2 proxies on procedural images (Turbo-like: the Turbo proxy distilled for 8 "
                "steps at CFG 1; Raw-like: the trained proxy): dynamics, not Krea-2 quality",
         FLUX: "a small trained Flux proxy (ComfyUI's Flux at width 256, 2 double and 4 single blocks, a base model "
               "sampled at CFG 3.5) on the Krea-2 proxy's procedural images: dynamics, not Flux quality"}


def conditions(comfy_root: Path, proxy, images, repeats: int, threads: str | None, turbo_proxy,
               flux_proxy=None, regimes=regimes_of(KREA2)) -> dict:
    """The run's conditions; ``proxies``: the build (cache folder) each of ``regimes`` sampled (each decoded by
    its build's codec: the Turbo proxy's is the trained proxy's), ``builds`` their weights, ``proxy`` the trained
    proxy (the Flux proxy in a run without it). A build not sampled is None."""
    import torch

    from devkit.krea2_prompts import FLUX_PROXY_MODEL, PROXY_MODEL, TURBO_PROXY_MODEL

    version = re.search(r'__version__\s*=\s*"([^"]+)"', (comfy_root / "comfyui_version.py").read_text())
    built = {model: b for model, b in ((PROXY_MODEL, proxy), (TURBO_PROXY_MODEL, turbo_proxy),
                                       (FLUX_PROXY_MODEL, flux_proxy)) if b is not None}
    main = proxy or flux_proxy
    return {"date": datetime.date.today().isoformat(), "comfyui": version.group(1) if version else "unknown",
            "torch": torch.__version__, "device": "CPU", "threads": threads,
            "proxy": main.checkpoint.parent.name, "models": {name: REGIMES[name].model for name in regimes},
            "proxies": {name: built[REGIMES[name].model].checkpoint.parent.name for name in regimes},
            "builds": {b.checkpoint.parent.name: {"weights_sha256": b.info["weights_sha256"]} for b in built.values()},
            "image_size": main.settings.image_size,
            "sampler": "euler/simple (the fewer-steps rows: their own sampler, simple)",
            "images": [list(i) for i in images], "repeats": repeats,
            "note": "; ".join(NOTES[family] for family in dict.fromkeys(REGIMES[name].family for name in regimes))}


def title(rows: list[dict], info: dict) -> str:
    """The plot's title, naming the proxies the rows sampled (a Flux run's are no Krea-2 proxy)."""
    names = " and ".join(families(rows))
    return (f"{names} proxy (small trained model, {info['device']}, {info['threads']} thread(s)), {info['date']}: "
            f"proxy figures, dynamics, not {names} quality")


def write_results(rows: list[dict], comparisons: dict, info: dict, out_dir: Path,
                  stem: str = "peers", own_cost: dict | None = None) -> tuple[Path, Path, dict[str, list[str]]]:
    """The table as JSON and the plot as PNG; also returns the curves drawn per regime."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out_dir / f"{stem}.json", out_dir / f"{stem}.png"
    written = {"conditions": info, "rows": rows, "comparisons": comparisons, "own_cost": own_cost or {}}
    json_path.write_text(strict_json(written, indent=1) + "\n")
    drawn = plot(rows, png_path, title(rows, info))
    return json_path, png_path, drawn


def report(rows: list[dict], info: dict, out_dir: Path, stem: str = "peers",
           costs_path: Path = COSTS, own_cost: dict | None = None) -> tuple[list[dict], dict]:
    """Compare (measured, and projected when Krea-2's component costs are measured and the rows are Krea-2's),
    write the JSON and the plot, print the Markdown table, the verdicts, the settings against fewer steps and
    the target checks."""
    comparisons = head_to_head(rows)
    bases = [comparisons]
    krea2 = families(rows) == [KREA2]
    if not krea2:
        info = {**info, "projection": None}   # said so, rather than left out: the JSON tells why
    elif costs_path.exists() and any(r["method"] == CACHING_OFF_FULL_TEXT for r in rows):
        info = {**info, "projection": add_projection(rows, krea2_costs.load(costs_path), own_cost=own_cost)}
        comparisons["projected"] = head_to_head(rows, key="projected")
        bases.append(comparisons["projected"])
    json_path, png_path, _ = write_results(rows, comparisons, info, out_dir, stem, own_cost)
    print(markdown_table(rows))
    if not krea2:
        print(f"\nNot projected on Krea-2: Krea-2's component costs price only Krea-2 proxy rows, these sample the "
              f"{' and '.join(families(rows))} proxy; speeds are measured on the proxy and counted in model calls.")
    for result in bases:
        basis = "measured" if result["basis"] == "wall" else "PROJECTED on Krea-2"
        print(f"\nAt each peer setting, the node's best setting at least as fast (within 5%), {basis}:")
        print("\n".join(verdict_lines(result)))
        fewer = fewer_steps_lines(result)
        if fewer:
            print(f"Against fewer steps at the speed of each setting that skips work, {basis} (MAE against the "
                  f"uncached image at the full steps):")
            print("\n".join(fewer))
    print()
    print("\n".join(target_checks(rows, bases, own_cost)))
    print(f"\nWrote {json_path} and {png_path}")
    return rows, comparisons
