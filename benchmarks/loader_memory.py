"""Peak resident memory of 'Load Krea-2 (diffusers)' while it loads, relative to the weights.

Writes a seeded-random Krea-2 checkpoint of a few hundred MB (original key format, fp32),
then loads it in a fresh Python process (so that nothing else inflates its resident set),
resets the kernel's peak-RSS counter after the imports and reports

    ratio = (peak RSS during loading - RSS before loading) / bytes of the loaded weights

The loader promises a ratio of at most 1.3. Linux only (/proc). Usage:

    python -m benchmarks.loader_memory [--layers 8] [--dtype default|bf16|fp16|fp32] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from devkit.comfy_harness import load_pack  # the repository as the package ComfyUI sees

LIMIT = 1.3


def benchmark_shape(layers: int):
    from devkit.krea2_synthetic import Krea2Shape

    # ~49 MB of fp32 weights per block; the text-fusion part stays small.
    return Krea2Shape(features=1024, layers=layers, heads=8, kvheads=2, txtdim=160, txtlayers=12)


def write_checkpoint(path: Path, layers: int) -> None:
    from devkit.krea2_synthetic import save_native_checkpoint

    save_native_checkpoint(path, benchmark_shape(layers), seed=0)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(path: Path, dtype_name: str) -> dict:
    """Runs in the fresh process: load once, report memory figures in bytes."""
    import torch  # noqa: F401  (imported before the baseline so its libraries are not counted)
    import diffusers  # noqa: F401
    from krea2_cachedit.adapters.krea2_loader import krea2_diffusers as kd
    from krea2_cachedit.adapters.krea2_loader.krea2_checkpoint import WEIGHT_DTYPES

    checkpoint = kd.inspect(path)
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM (peak RSS) to the current RSS
    before = _status_kib("VmRSS") * 1024
    model = kd.load_transformer(checkpoint, WEIGHT_DTYPES[dtype_name])
    peak = _status_kib("VmHWM") * 1024
    after = _status_kib("VmRSS") * 1024
    loaded = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"file_bytes": checkpoint.weight_bytes, "loaded_bytes": loaded, "rss_before": before,
            "rss_peak": peak, "rss_after": after, "ratio": (peak - before) / loaded}


def run_fresh(path: Path, dtype_name: str) -> dict:
    output = subprocess.run([sys.executable, __file__, "--measure", str(path), "--dtype", dtype_name],
                            check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=8, help="transformer blocks (~49 MB fp32 each)")
    parser.add_argument("--dtype", default="default", choices=["default", "bf16", "fp16", "fp32"])
    parser.add_argument("--keep", type=Path, help="write the checkpoint here and keep it")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # internal: the fresh process
    args = parser.parse_args()
    load_pack()

    if args.measure:
        print(json.dumps(measure(args.measure, args.dtype)))
        return 0

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"krea2_benchmark_{args.layers}l.safetensors"
        if not path.exists():
            write_checkpoint(path, args.layers)  # here; only the fresh process is measured
        result = run_fresh(path, args.dtype)

    mib = 1 << 20
    print(f"checkpoint   {result['file_bytes'] / mib:8.1f} MiB on disk ({path.name}), weight_dtype={args.dtype}")
    print(f"loaded       {result['loaded_bytes'] / mib:8.1f} MiB of weights")
    print(f"RSS before   {result['rss_before'] / mib:8.1f} MiB, peak {result['rss_peak'] / mib:.1f} MiB, "
          f"after {result['rss_after'] / mib:.1f} MiB")
    verdict = "OK" if result["ratio"] <= LIMIT else f"ABOVE the {LIMIT}x limit"
    print(f"ratio        {result['ratio']:.3f}  (peak growth / loaded weights; limit {LIMIT}) {verdict}")
    return 0 if result["ratio"] <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
