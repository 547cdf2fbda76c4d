"""The figures the pack quotes (adapters/figures.py) are their sources', and its pages quote no others.

Each of the pack's own figures is read back from the committed results (benchmarks/results/, or the benchmark
report's table where no results file keeps it). On every page that quotes figures (the README, the user docs,
the help pages in en and zh, the zh locale and the nodes' source, where tooltips are written), each figure
(an MAE in /255, a speedup, a timing ``a s → b s``) must sit inside one of the module's phrases for the page's
language, so a figure changed on any one page is no longer one of them and fails here.

Not scanned: the benchmark report (docs/benchmarks.md), whose tables from committed results
``tests/benchmarks/test_report_tables.py`` holds cell by cell and whose dated runs no results file keeps, and
docs/proxy.md, the proxies' own measurements (that test holds the one table of it a results file keeps).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from krea2_cachedit.adapters import figures
from krea2_cachedit.adapters.dbcache.mask_standing import mask_standing_text, mask_standing_zh_text
from krea2_cachedit.adapters.forecast.forecast_settings import PRESETS

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
REGIMES = {8: "turbo", 52: "raw"}

EN_PAGES = ["README.md", *(f"docs/{name}.md" for name in
                           ("settings", "nodes", "stats", "how-it-works", "troubleshooting", "families",
                            "gpu-check", "development")),
            *sorted(str(p.relative_to(REPO)) for p in (REPO / "web" / "docs").glob("*.md")),
            *sorted(str(p.relative_to(REPO)) for p in (REPO / "nodes").glob("*.py"))]
ZH_PAGES = [*sorted(str(p.relative_to(REPO)) for p in (REPO / "web" / "docs").glob("*/zh.md")),
            "locales/zh/nodeDefs.json", "locales/zh/main.json"]
# A figure's shape: an MAE in /255, a speedup (1.4x, 1.4 倍, 1/3.94), a timing (1.27 s → 0.92 s).
FIGURE = re.compile(r"\d+(?:\.\d+)? ?/ ?255|\d+\.\d+ ?x\b|\d+(?:\.\d+)? ?(?:s|秒) →|\d+\.\d+ ?倍|(?<![\d.])1/\d+\.\d+")


def flat(text: str) -> str:
    return " ".join(text.split())


def peers_row(steps: int, method: str, setting: str) -> dict:
    rows = json.loads((RESULTS / "peers.json").read_text())["rows"]
    (row,) = [r for r in rows if r["regime"] == REGIMES[steps] and r["method"] == method and r["setting"] == setting]
    return row


def computed_calls(row: dict) -> int:
    low, high = row["skipped_range"]
    assert low == high, f"{row['case']} skips a different number of calls per image"
    return row["steps"] - low


def euler_at(steps: int, calls: int) -> float | None:
    rows = json.loads((RESULTS / "peers.json").read_text())["rows"]
    found = [r["mae_255"] for r in rows if r["regime"] == REGIMES[steps] and r["method"] == "fewer steps, euler"
             and r["steps"] == calls]
    return round(found[0], 2) if found else None


def measured_standing(standing: figures.Standing, method: str) -> figures.Standing:
    row = peers_row(standing.steps, method, standing.setting)
    calls = computed_calls(row)
    return figures.Standing(standing.setting, standing.steps, calls, round(row["mae_255"], 2),
                            euler_at(standing.steps, calls))


@pytest.mark.parametrize(("standings", "method"), [
    (figures.PRESET_STANDINGS, "Cache-DiT forecast presets"),
    (figures.SPECTRUM_PAPER_STANDINGS, "Cache-DiT Spectrum as published"),
    (figures.DEFAULTS_STANDINGS, "Cache-DiT threshold"),
], ids=["presets", "spectrum_paper", "defaults"])
def test_the_standings_are_the_peer_table(standings, method):
    assert list(standings) == [measured_standing(s, method) for s in standings]


def test_every_forecast_preset_but_the_papers_has_its_standing():
    ours = {name for name in PRESETS if not name.startswith("spectrum_paper")}
    assert {s.setting for s in figures.PRESET_STANDINGS} == ours


def test_the_presets_beside_auto_are_the_forecast_auto_grid():
    """Every cell of benchmarks/forecast_auto.py's grid where a fixed preset makes as many calls as ``auto``."""
    regimes = json.loads((RESULTS / "forecast_auto.json").read_text())["regimes"]
    measured = []
    for regime in regimes.values():
        for row in regime["rows"]:
            for name, mae in row["presets"].items():
                euler = round(row["euler"], 2)
                measured += [figures.Standing(name, row["steps"], row["calls"], round(mae, 2), euler),
                             figures.Standing("auto", row["steps"], row["calls"], round(row["auto"], 2), euler)]
    assert list(figures.FORECAST_AUTO_STANDINGS) == measured


def test_the_multistep_standings_are_the_forecast_multistep_results():
    """Every row of benchmarks/forecast_multistep.py: a preset or ``auto`` beside res_multistep at as many steps."""
    results = json.loads((RESULTS / "forecast_multistep.json").read_text())
    measured = [figures.Standing(row["setting"].split(" ")[0], regime["steps"], row["calls"], round(row["mae"], 2),
                                 round(row["fewer_steps"], 2), results["sampler"])
                for regime in results["regimes"].values() for row in regime["rows"]]
    assert list(figures.FORECAST_MULTISTEP_STANDINGS) == measured


def test_the_benchmark_report_quotes_the_multistep_standings():
    """docs/benchmarks.md says the multistep figures in the module's words (the report is not scanned for strays)."""
    report = flat((REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8"))
    missing = [s.phrase("en") for s in figures.FORECAST_MULTISTEP_STANDINGS if s.phrase("en") not in report]
    assert not missing, missing


# Each Flux standing's rows in peers_flux.json: (method, setting).
FLUX_ROWS = {figures.FLUX_MEDIUM_TAYLORSEER: ("Cache-DiT step masks + taylorseer", "medium"),
             "auto": ("Cache-DiT forecast auto, speedup", "2")}


def test_the_flux_standings_are_the_flux_peer_table():
    rows = json.loads((RESULTS / "peers_flux.json").read_text())["rows"]
    measured = []
    for standing in figures.FLUX_STANDINGS:
        regime = f"flux{standing.steps}"
        method, setting = FLUX_ROWS[standing.setting]
        (row,) = [r for r in rows if r["regime"] == regime and r["method"] == method and r["setting"] == setting]
        calls = computed_calls(row)
        (euler,) = [r["mae_255"] for r in rows if r["regime"] == regime and r["method"] == "fewer steps, euler"
                    and r["steps"] == calls]
        measured.append(figures.Standing(standing.setting, standing.steps, calls, round(row["mae_255"], 2),
                                         round(euler, 2)))
    assert list(figures.FLUX_STANDINGS) == measured


def test_taylorseer_on_the_defaults_is_the_peer_table():
    c = figures.DEFAULTS_TAYLORSEER
    plain = peers_row(c.steps, "Cache-DiT threshold", "0.24")
    served = peers_row(c.steps, f"Cache-DiT + {c.calibrator}", "0.24")
    assert computed_calls(plain) == computed_calls(served) == c.calls
    assert (round(plain["mae_255"], 2), round(served["mae_255"], 2)) == (c.plain_mae_255, c.mae_255)


def test_dmd_on_the_long_masks_is_the_peer_table():
    measured = {mask: round(peers_row(52, "Cache-DiT step masks + dmd", mask)["mae_255"], 2)
                for mask in figures.DMD_LONG_MASKS}
    assert measured == figures.DMD_LONG_MASKS


def test_the_gpu_check_figures_are_its_results():
    cases = {c["case"]: c for c in json.loads((RESULTS / "gpu_check.json").read_text())["cases"]}
    g = figures.GPU_CHECK
    assert (g.turbo_uncached_s, g.turbo_fast_s, g.turbo_fast_ideal) == (
        cases["turbo uncached"]["seconds"], cases["turbo steps_mask fast"]["seconds"],
        cases["turbo steps_mask fast"]["ideal"])
    assert (g.raw_uncached_s, g.raw_fast_s) == (cases["raw uncached"]["seconds"], cases["raw steps_mask fast"]["seconds"])
    assert (g.turbo_extra_mib, g.raw_extra_mib) == (round(cases["turbo steps_mask fast"]["extra_vram_mib"], 2),
                                                  round(cases["raw steps_mask fast"]["extra_vram_mib"], 2))
    assert g.compiled_fast_vs_eager == round(cases["turbo compiled steps_mask fast"]["vs_eager"], 4)


def test_the_random_weight_speedups_are_the_demo_table():
    """benchmarks/speedup.py keeps no results file: its table in the benchmark report is the source."""
    report = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    demo = report[report.index("## Speedup demo"):report.index("## How sure")]
    for mask, speedup in figures.RANDOM_WEIGHTS_CPU.items():
        (row,) = [line for line in demo.splitlines() if line.startswith(f"| steps_mask {mask} | 1 | none |")]
        assert row.split("|")[6].strip() == f"{speedup:.2f}x", row


def test_the_sglang_speedups_are_their_timings():
    assert [(r.model, r.speedup) for r in figures.SGLANG_KREA2] == [("Turbo", 1.4), ("Raw", 2.9)]


def page_text(page: str) -> str:
    text = (REPO / page).read_text(encoding="utf-8")
    if page.endswith(".json"):
        strings: list[str] = []

        def collect(value):
            if isinstance(value, str):
                strings.append(value)
            elif isinstance(value, dict):
                [collect(v) for v in value.values()]
            elif isinstance(value, list):
                [collect(v) for v in value]
        collect(json.loads(text))
        text = "\n".join(strings)
    return re.sub(r"```.*?```", " ", text, flags=re.DOTALL)  # sample output, not a figure quoted


def stray_figures(page: str, locale: str) -> list[str]:
    text = flat(page_text(page))
    for phrase in sorted(figures.phrases(locale), key=len, reverse=True):
        text = text.replace(phrase, " ")
    text = re.sub(r"`[^`]*`", " ", text)  # an inline example (`white = 12.40 / 255`), not a figure quoted
    return [text[max(0, m.start() - 60):m.end() + 20] for m in FIGURE.finditer(text)]


@pytest.mark.parametrize("page", EN_PAGES)
def test_every_figure_on_an_english_page_is_a_quoted_figure(page):
    assert not stray_figures(page, "en"), f"{page}: figures not in adapters/figures.py's phrases"


@pytest.mark.parametrize("page", ZH_PAGES)
def test_every_figure_on_a_zh_page_is_a_quoted_figure(page):
    assert not stray_figures(page, "zh"), f"{page}: figures not in adapters/figures.py's phrases"


def evidence(node: str, locale: str) -> str:
    """A cache node's evidence section on its help page, where the figures of its tooltips moved."""
    path = REPO / "web" / "docs" / (f"{node}.md" if locale == "en" else f"{node}/zh.md")
    heading = "## Evidence" if locale == "en" else "## 依据"
    return flat(path.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0])


@pytest.mark.parametrize("locale", ["en", "zh"])
@pytest.mark.parametrize("node", ["Krea2CacheDiT", "CacheDiTDBCache"])
def test_the_dbcache_pages_evidence_quotes_the_defaults_and_masks(node, locale):
    text = evidence(node, locale)
    masks = mask_standing_text() if locale == "en" else mask_standing_zh_text()
    quoted = [*(row.phrase(locale) for row in figures.SGLANG_KREA2), flat(masks),
              *(figures.standing_phrase(s, locale) for s in figures.DEFAULTS_STANDINGS),
              figures.DEFAULTS_TAYLORSEER.phrase(locale), figures.random_weights_phrase(locale)]
    missing = [phrase for phrase in quoted if phrase not in text]
    assert not missing, f"{node} ({locale}): figures missing from its evidence section: {missing}"


@pytest.mark.parametrize("locale", ["en", "zh"])
def test_the_forecast_pages_evidence_quotes_every_presets_standing(locale):
    text = evidence("CacheDiTSpectrum", locale)
    quoted = [figures.standing_phrase(s, locale) for s in (*figures.PRESET_STANDINGS, *figures.SPECTRUM_PAPER_STANDINGS[:2])]
    missing = [phrase for phrase in quoted if phrase not in text]
    assert not missing, f"CacheDiTSpectrum ({locale}): figures missing from its evidence section: {missing}"
