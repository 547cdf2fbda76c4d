"""What one Krea-2 model call costs, by component, at Krea-2's real size: the inputs of the projection.

The trained proxy (8 blocks, width 256) is cheap enough to race caches on a CPU, but its cost
structure is not Krea-2's: its always-computed first block is 12.5% of its blocks (3.6% of
Krea-2's 28), and its text path and embeddings weigh more. This script times, at Krea-2's real
width, heads and text size (the realshape tier's architecture, ``krea2_synthetic.FULL_SIZE``,
one block instead of 28), for one 1024x1024 image:

- ``block``: one transformer block over text + image tokens;
- ``text``: the text path (text fusion and projection into the transformer width);
- ``rest``: everything else of a call (timestep embedding and modulation, image embedding, rotary
  positions, final layer).

A whole call is then ``28 * block + text + rest``. The peer benchmark (``benchmarks.peers``)
combines these with each case's computed, cached and skipped calls and text computations (and the
node's own per-call time, measured on the proxy) into a *projected* speedup on Krea-2 (``projection``). Seeded-random
weights: costs depend on shapes, not on values.

    python -m benchmarks.krea2_costs            # CPU, float32 (minutes); writes results/krea2_costs.json
    python -m benchmarks.krea2_costs --cuda     # a GPU, bf16
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import time
from pathlib import Path

import torch

from devkit.krea2_synthetic import FULL_SIZE, diffusers_transformer

BENCH_DIR = Path(__file__).resolve().parent

RESULTS = BENCH_DIR / "results" / "krea2_costs.json"
BLOCKS = FULL_SIZE.layers   # 28


@dataclasses.dataclass(frozen=True)
class CallCosts:
    """Seconds of one model call's parts at Krea-2's size (batch 1)."""

    block: float
    text: float
    rest: float
    blocks: int = BLOCKS

    @property
    def call(self) -> float:
        return self.blocks * self.block + self.text + self.rest

    def scaled_to(self, call_seconds: float) -> "CallCosts":
        """The same shares of a call, for a call of ``call_seconds`` (e.g. on another device)."""
        factor = call_seconds / self.call
        return CallCosts(self.block * factor, self.text * factor, self.rest * factor, self.blocks)

    def shares(self) -> dict:
        return {"blocks": self.blocks * self.block / self.call, "text": self.text / self.call,
                "rest": self.rest / self.call}


def _median_seconds(function, repeats: int, device: torch.device) -> float:
    function()  # warm-up: allocations, kernels chosen
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        function()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(device: torch.device, dtype: torch.dtype, side: int = 1024, text_tokens: int = 128,
            repeats: int = 2) -> CallCosts:
    shape = dataclasses.replace(FULL_SIZE, layers=1)
    model = diffusers_transformer(shape, seed=0, dtype=dtype).to(device)
    grid = side // 16
    generator = torch.Generator().manual_seed(0)
    latent = torch.randn(1, grid * grid, shape.channels * 4, generator=generator).to(device, dtype)
    context = torch.randn(1, text_tokens, shape.txtlayers, shape.txtdim, generator=generator).to(device, dtype)
    positions = torch.zeros(text_tokens + grid * grid, 3)
    positions[text_tokens:, 1] = torch.arange(grid * grid) // grid
    positions[text_tokens:, 2] = torch.arange(grid * grid) % grid
    positions = positions.to(device)
    timestep = torch.full((1,), 0.5, device=device)

    with torch.inference_mode():
        text_tokens_out = model.txt_in(model.text_fusion(context))
        temb = model.time_embed(timestep, dtype=dtype)
        modulation = model.time_mod_proj(torch.nn.functional.gelu(temb, approximate="tanh"))
        rope = model.rotary_emb(positions)
        hidden = torch.cat([text_tokens_out, model.img_in(latent)], dim=1)
        block = model.transformer_blocks[0]

        def text():
            model.txt_in(model.text_fusion(context))

        def one_block():
            block(hidden, modulation, rope, None)

        def rest():  # what a call computes besides the blocks and the text path
            embedded = model.time_embed(timestep, dtype=dtype)
            model.time_mod_proj(torch.nn.functional.gelu(embedded, approximate="tanh"))
            torch.cat([text_tokens_out, model.img_in(latent)], dim=1)
            model.rotary_emb(positions)
            model.final_layer(hidden[:, text_tokens:], embedded)

        block_s = _median_seconds(one_block, repeats, device)
        text_s = _median_seconds(text, repeats, device)
        rest_s = _median_seconds(rest, repeats, device)
    return CallCosts(block=block_s, text=text_s, rest=rest_s)


def load(path: Path = RESULTS) -> CallCosts:
    data = json.loads(path.read_text())
    return CallCosts(**{k: data["costs"][k] for k in ("block", "text", "rest", "blocks")})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuda", action="store_true", help="time on the GPU in bf16 (default: CPU, float32)")
    parser.add_argument("--side", type=int, default=1024, help="image side in pixels (default 1024)")
    parser.add_argument("--text-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    device = torch.device("cuda" if args.cuda else "cpu")
    dtype = torch.bfloat16 if args.cuda else torch.float32
    print(f"Timing Krea-2's parts at full width ({FULL_SIZE.features}, text {FULL_SIZE.txtlayers}x{FULL_SIZE.txtdim}), "
          f"{args.side}x{args.side}, {args.text_tokens} text tokens, {device.type} {dtype} ...", flush=True)
    costs = measure(device, dtype, args.side, args.text_tokens, args.repeats)
    info = {"date": datetime.date.today().isoformat(), "torch": torch.__version__, "device": device.type,
            "dtype": str(dtype).replace("torch.", ""), "threads": torch.get_num_threads(), "side": args.side,
            "text_tokens": args.text_tokens, "batch": 1}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"conditions": info, "costs": dataclasses.asdict(costs),
                                          "shares": costs.shares()}, indent=1) + "\n")
    shares = costs.shares()
    print(f"one block {costs.block:.3f} s, text path {costs.text:.3f} s, rest {costs.rest:.3f} s; a call "
          f"({BLOCKS} blocks) {costs.call:.2f} s: blocks {shares['blocks']:.1%}, text {shares['text']:.1%}, "
          f"rest {shares['rest']:.1%}. Wrote {args.out}")
    return costs


if __name__ == "__main__":
    main()
