"""How each step mask stood against fewer steps on this pack's proxies (for users: a small test model trained on
drawn shapes, not Krea-2).

A step mask fixes how many model calls a run makes, so a user can get the same number of calls by lowering
the step count instead. These are the peer benchmark's figures (``benchmarks/peers``, its three images,
``benchmarks/results/peers.json``): MAE/255 of the decoded image against the uncached one, the mask with its
best calibrator beside plain euler at as many steps as the mask makes calls. 8 steps at CFG 1 on the
distilled Turbo proxy, 52 steps at CFG 3.5 on the trained proxy: dynamics on procedural images, not Krea-2
quality. ``tests/benchmarks/test_mask_standing.py`` holds them to the committed table, so a re-run that
moves them fails until they are updated here; ``adapters/figures.py`` quotes them with the pack's other figures,
and the cache nodes' help pages quote ``mask_standing_text`` (en) and ``mask_standing_zh_text`` (zh) whole.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class MaskStanding:
    """One mask at one step count: its computed calls, its best image and fewer steps' at those calls."""

    mask: str
    steps: int            # 8: the distilled Turbo proxy, CFG 1; 52: the trained proxy, CFG 3.5
    calls: int            # model calls the mask computes
    calibrator: str       # the calibrator that gave its closest image ("none": the cached residual as is)
    mae_255: float
    euler_mae_255: float  # plain euler at `calls` steps

    @property
    def beats_fewer_steps(self) -> bool:
        return self.mae_255 < self.euler_mae_255

    def text(self) -> str:
        served = "" if self.calibrator == "none" else f" with {self.calibrator}"
        verdict = "closer" if self.beats_fewer_steps else "farther"
        return (f"{self.mask} {self.calls} calls{served} {self.mae_255:.2f}, {verdict} than euler at {self.calls} "
                f"steps {self.euler_mae_255:.2f}")

    def zh_text(self) -> str:
        """``text`` in the words of the zh help pages."""
        served = "" if self.calibrator == "none" else f"（{self.calibrator}）"
        verdict = "更接近" if self.beats_fewer_steps else "更远"
        return (f"{self.mask} {self.calls} 次调用{served} {self.mae_255:.2f}，比 euler {self.calls} 步"
                f"（{self.euler_mae_255:.2f}）{verdict}")


MASK_STANDINGS: tuple[MaskStanding, ...] = (
    MaskStanding("slow", 8, 7, "none", 0.93, 2.45),
    MaskStanding("medium", 8, 6, "none", 1.73, 2.80),
    MaskStanding("fast", 8, 5, "none", 3.46, 4.03),
    MaskStanding("ultra", 8, 4, "none", 6.81, 4.37),
    MaskStanding("slow", 52, 38, "taylorseer", 0.64, 0.60),
    MaskStanding("medium", 52, 30, "foca", 1.05, 0.67),
    MaskStanding("fast", 52, 25, "foca", 2.48, 1.13),
    MaskStanding("ultra", 52, 17, "foca", 5.43, 1.65),
)


# Whose figures these are and what they rest on, in the words of the help pages' "Evidence" sections.
_REGIMES = {8: "8 steps, CFG 1 (the test model distilled for 8 steps, as Turbo is)", 52: "52 steps, CFG 3.5"}
_REGIMES_ZH = {8: "8 步，CFG 1（为 8 步蒸馏的测试模型，与 Turbo 一样）", 52: "52 步，CFG 3.5"}


def mask_standing_text() -> str:
    """The masks against fewer steps, an item per step count: the cache nodes' help pages (web/docs) quote it."""
    lines = ["On a small test model trained on drawn shapes, not Krea-2: MAE/255 against the uncached image, each "
             "mask with the calibrator that served it best, beside plain euler at as many steps as the mask makes "
             "model calls.", ""]
    for steps, regime in _REGIMES.items():
        row = [standing.text() for standing in MASK_STANDINGS if standing.steps == steps]
        lines.append(f"- {regime}: " + "; ".join(row) + ".")
    return "\n".join(lines)


def mask_standing_zh_text() -> str:
    """``mask_standing_text`` in Chinese, as the zh help pages (web/docs/<node>/zh.md) quote it."""
    lines = ["在一个用绘制图形训练的小型测试模型上（不是 Krea-2）：相对不缓存图像的 MAE/255；每个掩码取效果最好的"
             "校准器，与模型调用次数相同步数的普通 euler 对比。", ""]
    for steps, regime in _REGIMES_ZH.items():
        row = [standing.zh_text() for standing in MASK_STANDINGS if standing.steps == steps]
        lines.append(f"- {regime}：" + "；".join(row) + "。")
    return "\n".join(lines)
