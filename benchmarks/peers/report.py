"""What a peer-benchmark run leaves: the JSON and the plot, and the printed table, verdicts and checks.

The rows are compared on the measured wall clock and, when Krea-2's component costs are measured
(krea2_costs.py), on the speedup projected onto Krea-2 (projection.py) as well.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from .cases import CACHING_OFF_FULL_TEXT, REGIMES, is_node_default  # first: its speedup import loads the pack
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


def conditions(comfy_root: Path, proxy, images, repeats: int, threads: str | None, turbo_proxy) -> dict:
    """The run's conditions; ``proxies``: the build (cache folder) each regime sampled, ``proxy`` the one
    whose codec decoded every image."""
    import torch

    from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

    version = re.search(r'__version__\s*=\s*"([^"]+)"', (comfy_root / "comfyui_version.py").read_text())
    builds = {PROXY_MODEL: proxy.checkpoint.parent.name, TURBO_PROXY_MODEL: turbo_proxy.checkpoint.parent.name}
    return {"date": datetime.date.today().isoformat(), "comfyui": version.group(1) if version else "unknown",
            "torch": torch.__version__, "device": "CPU", "threads": threads,
            "proxy": proxy.checkpoint.parent.name, "models": {name: regime.model for name, regime in REGIMES.items()},
            "proxies": {name: builds[regime.model] for name, regime in REGIMES.items()},
            "builds": {built.checkpoint.parent.name: {"weights_sha256": built.info["weights_sha256"]}
                       for built in (proxy, turbo_proxy)},
            "image_size": proxy.settings.image_size,
            "sampler": "euler/simple (the fewer-steps rows: their own sampler, simple)",
            "images": [list(i) for i in images], "repeats": repeats,
            "note": "small trained Krea-2 proxies on procedural images (Turbo-like: the Turbo proxy distilled for 8 "
                    "steps at CFG 1; Raw-like: the trained proxy): dynamics, not Krea-2 quality"}


def write_results(rows: list[dict], comparisons: dict, info: dict, out_dir: Path,
                  stem: str = "peers", own_cost: dict | None = None) -> tuple[Path, Path, dict[str, list[str]]]:
    """The table as JSON and the plot as PNG; also returns the curves drawn per regime."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out_dir / f"{stem}.json", out_dir / f"{stem}.png"
    written = {"conditions": info, "rows": rows, "comparisons": comparisons, "own_cost": own_cost or {}}
    json_path.write_text(strict_json(written, indent=1) + "\n")
    drawn = plot(rows, png_path, f"Krea-2 proxy (small trained model, {info['device']}, {info['threads']} thread(s)), "
                                 f"{info['date']}: proxy figures, dynamics, not Krea-2 quality")
    return json_path, png_path, drawn


def report(rows: list[dict], info: dict, out_dir: Path, stem: str = "peers",
           costs_path: Path = COSTS, own_cost: dict | None = None) -> tuple[list[dict], dict]:
    """Compare (measured, and projected when Krea-2's component costs are measured), write the JSON and
    the plot, print the Markdown table, the verdicts, the settings against fewer steps and the target checks."""
    comparisons = head_to_head(rows)
    bases = [comparisons]
    if costs_path.exists() and any(r["method"] == CACHING_OFF_FULL_TEXT for r in rows):
        info = {**info, "projection": add_projection(rows, krea2_costs.load(costs_path))}
        comparisons["projected"] = head_to_head(rows, key="projected")
        bases.append(comparisons["projected"])
    json_path, png_path, _ = write_results(rows, comparisons, info, out_dir, stem, own_cost)
    print(markdown_table(rows))
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
