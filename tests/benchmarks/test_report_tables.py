"""The benchmark report's tables (docs/benchmarks.md) that come from a committed results file show its values.

Each cell is the file's value at the printed rounding, its row found by its case or setting name:

- "Against fewer steps": every cell of the table from ``benchmarks/results/peers.json`` (euler at as many model
  calls and the nearest multistep sampler as the benchmark's own ``against_fewer_steps`` finds them), and the
  counts of settings below the euler line from ``comparisons.vs_fewer_steps`` of both speed bases;
- "GPU check on an H200": every cell from ``benchmarks/results/gpu_check.json``;
- "Forecast error per step", the table of the run on the landed presets: every cell from
  ``benchmarks/results/forecast_error.json``, but for the row of the search before ``target`` and
  ``raw_8_of_52``'s output forecast, which that file does not keep.

And in docs/proxy.md, the Turbo proxy's feature moves per step (``change_img`` of ``forecast_error.json``) and
their sigmas.

Not held, because no committed file keeps their run: the other tables of "Against EasyCache and LazyCache"
(dated runs that predate the Turbo proxy: both regimes sampled the trained proxy), "On the trained proxy", the
first table of "Forecast error per step", the host-time and py-spy tables, the soak run and the random-weight
"Speedup demo" (``tests/benchmarks/test_quoted_figures.py`` takes that table as its own source); in
docs/proxy.md, the proxy tier's measurements and the Turbo proxy's first ``--no-search`` figures.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmarks.peers.checks import EQUAL_CALLS
from benchmarks.peers.compare import against_fewer_steps, euler_curve

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
REPORT = REPO / "docs" / "benchmarks.md"


def section(title: str) -> str:
    """The report's text from the heading that starts with ``title`` to the next heading of its level."""
    text = REPORT.read_text(encoding="utf-8")
    level = title.split(" ")[0]
    start = text.index(f"\n{title}") + 1
    end = text.find(f"\n{level} ", start + len(title))
    return text[start:] if end < 0 else text[start:end]


def table(text: str, header: str) -> list[list[str]]:
    """The body rows of the first table in ``text`` whose header line starts with ``header``, as cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert rows, f"no table under {header!r}"
    return rows


def bold(cell: str) -> str:
    return cell.replace("**", "")


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


# ---- Against fewer steps (peers.json)

FEWER_STEPS_REGIMES = {"8 steps, CFG 1": "turbo", "52 steps, CFG 3.5": "raw"}


def fewer_steps_case(regime: str, setting: str) -> str:
    if setting.startswith("node defaults"):
        return f"{regime} Cache-DiT threshold 0.24"
    if setting == "Spectrum as published":
        return f"{regime} Cache-DiT Spectrum as published spectrum_paper"
    if auto := re.fullmatch(r"`auto` ([\d.]+)x", setting):
        return f"{regime} Cache-DiT forecast auto, speedup {auto.group(1)}"
    (preset,) = re.fullmatch(r"`(\w+)`", setting).groups()
    return f"{regime} Cache-DiT forecast presets {preset}"


def fewer_steps_mismatches(report_rows: list[list[str]], peer_rows: list[dict]) -> list[tuple]:
    """(case, cell, shown, from the JSON) for each cell of the table that is not the JSON's value."""
    by_case = {r["case"]: r for r in peer_rows}
    wrong, regime = [], None
    for cells in report_rows:
        regime_cell, setting, calls, mae, euler, multistep, wall, projected = cells
        regime = FEWER_STEPS_REGIMES[regime_cell] if regime_cell else regime
        case = fewer_steps_case(regime, setting)
        row = by_case[case]
        of_regime = [r for r in peer_rows if r["regime"] == regime]
        found = against_fewer_steps(row, euler_curve(of_regime, EQUAL_CALLS), of_regime, EQUAL_CALLS)
        expected = {"model calls": f"{found['calls']} of {row['steps']}", "MAE": f"{row['mae_255']:.2f}",
                    "euler": f"{found['euler_mae_255']:.2f}", "wall": f"{row['wall']:.2f}x",
                    "projected": f"{row['projected']:.2f}x"}
        shown = {"model calls": calls.split(" (")[0], "MAE": bold(mae), "euler": bold(euler).split(" (")[0],
                 "wall": wall, "projected": projected}
        if "(" in calls:
            expected["speed by calls"], shown["speed by calls"] = f"({row['steps'] / found['calls']:.1f}x)", \
                calls.split(" ", 3)[3]
        if between := re.search(r"\(between (\d+) and (\d+)\)", euler):
            expected["euler between"] = sorted(found["euler_between"])
            shown["euler between"] = sorted(f"{regime} fewer steps, euler {n}" for n in between.groups())
        if multistep == "-":
            expected["multistep"], shown["multistep"] = None, found["multistep"]
        else:
            sampler, count, value = re.match(r"(\w+) (\d+): (\d+\.\d+)", multistep).groups()
            expected["multistep"] = (found["multistep"], f"{found['multistep_mae_255']:.2f}")
            shown["multistep"] = (f"{regime} fewer steps, {sampler} {count}", value)
            for other, other_value in re.findall(r"\((\w+) (\d+\.\d+)\)", multistep):
                other_case = f"{regime} fewer steps, {other} {count}"
                expected[other_case], shown[other_case] = f"{by_case[other_case]['mae_255']:.2f}", other_value
        wrong += [(case, key, shown[key], expected[key]) for key in expected if shown[key] != expected[key]]
    return wrong


def test_the_fewer_steps_table_is_the_peer_results():
    rows = table(section("## Against fewer steps"), "| regime | setting | model calls |")
    assert len(rows) == 16
    assert sum(cells[1].startswith("`auto`") for cells in rows) == 7
    assert not fewer_steps_mismatches(rows, load("peers.json")["rows"])


def test_a_changed_cell_of_the_fewer_steps_table_is_found():
    rows = table(section("## Against fewer steps"), "| regime | setting | model calls |")
    peer_rows = load("peers.json")["rows"]
    changed = [list(r) for r in rows]
    changed[1][3] = "**2.25**"        # turbo_5_of_8's MAE
    changed[7][4] = "**1.87** (between 14 and 17)"
    changed[9][5] = "deis 11: 3.00"
    changed[2][5] = "ipndm 4: 4.47 (dpmpp_2m 10.94)"
    changed[14][3] = "**1.24**"       # auto 4x at 52 steps
    assert [m[:2] for m in fewer_steps_mismatches(changed, peer_rows)] == [
        ("turbo Cache-DiT forecast presets turbo_5_of_8", "MAE"),
        ("turbo Cache-DiT forecast presets turbo_4_of_8", "turbo fewer steps, dpmpp_2m 4"),
        ("raw Cache-DiT threshold 0.24", "euler between"),
        ("raw Cache-DiT forecast presets raw_1_in_5", "multistep"),
        ("raw Cache-DiT forecast auto, speedup 4", "MAE")]


def test_the_counts_below_the_euler_line_are_the_peer_comparisons():
    comparisons = load("peers.json")["comparisons"]
    text = " ".join(section("## Against fewer steps").split())
    counts = re.search(r"(\d+) of (\d+) Turbo-like and (\d+) of (\d+) Raw-like rows land below the euler line at "
                       r"their measured speed on the proxy, (\d+) of (\d+) and (\d+) of (\d+) at their projected speed",
                       text).groups()
    measured = comparisons["vs_fewer_steps"]["summary"]
    projected = comparisons["projected"]["vs_fewer_steps"]["summary"]
    assert [int(n) for n in counts] == [v for summary in (measured, projected) for regime in ("turbo", "raw")
                                        for v in (summary[regime]["node_beat_euler"],
                                                  summary[regime]["node_settings"])]


# ---- GPU check on an H200 (gpu_check.json)

def gpu_cells(case: dict) -> list[str]:
    def times(value):
        return "-" if value is None else f"{value:.2f}x"
    deviation = case["deviation"]
    return [str(case["steps"]), case["cached"] or "-", f"{case['seconds']:.3f}", times(case["ideal"]),
            times(case["speedup"]), times(case["vs_eager"]), f"{case['peak_vram_gib']:.1f} GiB",
            "-" if deviation is None else "0" if deviation == 0 else f"{deviation:.4f}"]


def test_the_gpu_check_table_is_its_results():
    cases = {c["case"]: c for c in load("gpu_check.json")["cases"]}
    rows = table(section("## GPU check on an H200"), "| case | steps | cached |")
    assert len(rows) == len(cases)
    for name, *cells in rows:
        case = cases[name.split(" (")[0]]
        if cells[-1] == "0 (bit-identical)":
            assert case["variant"] == "caching off", name
            cells[-1] = "0"
        assert cells == gpu_cells(case), name


def test_the_gpu_check_caching_off_overheads_are_its_results():
    overhead = load("gpu_check.json")["caching_off_overhead"]
    text = " ".join(section("## GPU check on an H200").split())
    shown = re.search(r"costs nothing measurable \((-?\d+\.\d+)% and (-?\d+\.\d+)%", text).groups()
    assert list(shown) == [f"{overhead[w]['overhead'] * 100:.1f}" for w in ("turbo", "raw")]
    assert all(overhead[w]["bit_identical"] for w in ("turbo", "raw"))


# ---- Forecast error per step, the run on the landed presets (forecast_error.json)

FORECAST_ROWS = {  # the row's first words: (regime, its setting in the JSON)
    "8 steps `turbo_5_of_8` (": ("turbo", "turbo_5_of_8"),
    "8 steps `turbo_4_of_8` as it was": ("turbo", "turbo_4_of_8 forecasting the feature (before)"),
    "8 steps `turbo_4_of_8` now": ("turbo", "turbo_4_of_8"),
    "52 steps `raw_1_in_4`": ("raw", "raw_1_in_4"),
    "52 steps `raw_8_of_52`": ("raw", "raw_8_of_52"),
}


def forecast_mismatches(rows: list[list[str]], regimes: dict) -> list[str]:
    wrong = []
    for label, computed, errors, latent, mae in rows:
        if label.startswith("8 steps, best of the search before"):
            continue  # that search's results are not kept
        if label.startswith("8 steps, best of the search now"):
            best = regimes["turbo"]["search"][0]
            shown = re.fullmatch(r"(\d+\.\d+) \(`(\w+)`\)", mae).groups()
            setting = regimes["turbo"]["settings"][shown[1]]
            expected = (f"{best['closed_loop']['mae_255']:.2f}", shown[1])
            if shown != expected or best["describe"] != setting["describe"] or computed != f"{best['computed']}/8":
                wrong.append(f"{label}: {computed} {mae}")
            continue
        (regime, name), = [v for k, v in FORECAST_ROWS.items() if label.startswith(k)]
        r = regimes[regime]
        s = r["settings"][name]
        moves = r["change_img_output" if s["target"] == "output" else "change_img"]
        cells = {"computed": (computed, f"{s['open_loop']['computed']}/{r['steps']}"),
                 "MAE": (mae.split(" (")[0], f"{s['closed_loop']['mae_255']:.2f}")}
        if errors:
            shown = re.findall(r"(\d+): (\d+\.\d+) \((?:move )?(\d+\.\d+)\)", errors)
            cells["errors"] = (shown, [(step, f"{s['open_loop']['rel_err_img'][step]:.2f}", f"{moves[int(step)]:.2f}")
                                       for step, _, _ in shown])
            cells["forecast steps"] = (sorted(int(step) for step, _, _ in shown), s["open_loop"]["forecast_steps"])
        if latent:
            cells["latent"] = (latent, f"{s['closed_loop']['x_rel_err'][-1]:.3f}")
        if output := re.search(r"\(of the output: (\d+\.\d+)\)", mae):
            as_output = s["describe"].replace(" at 0.7,", " at 0.7 of the output,")
            kept = [e for e in r["search"] if e["describe"] == as_output]
            if kept:  # raw_8_of_52's output forecast is not in the committed search
                cells["output"] = (output.group(1), f"{kept[0]['closed_loop']['mae_255']:.2f}")
        wrong += [f"{label}: {key} {a} / {b}" for key, (a, b) in cells.items() if a != b]
    return wrong


def forecast_table() -> list[list[str]]:
    text = section("## Forecast error per step")
    return table(text[text.index("Re-run"):], "| setting | computed | forecast errors")


def test_the_forecast_error_table_is_its_results():
    rows = forecast_table()
    assert len(rows) == 7
    assert not forecast_mismatches(rows, load("forecast_error.json")["regimes"])


def test_a_changed_cell_of_the_forecast_error_table_is_found():
    rows = [list(r) for r in forecast_table()]
    rows[0][2] = rows[0][2].replace("4: 0.35", "4: 0.36")
    rows[2][3] = "0.112"
    rows[5][4] = "0.95 (of the output: 0.98)"
    wrong = forecast_mismatches(rows, load("forecast_error.json")["regimes"])
    assert [w.split(": ")[1].split()[0] for w in wrong] == ["errors", "latent", "output"], wrong


def test_the_turbo_proxys_feature_moves_in_the_proxy_page_are_its_forecast_errors():
    turbo = load("forecast_error.json")["regimes"]["turbo"]
    text = (REPO / "docs" / "proxy.md").read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith("| step (sigma) |"))
    (row,) = [r for r in table(text, "| step (sigma) |") if r[0] == "final layer's feature: Turbo proxy"]
    moves = turbo["change_img"][1:]
    assert row[1:] == [f"{m:.3f}" for m in moves] + [f"{sum(moves) / len(moves):.3f}"]
    assert header.split("|")[2:-2] == [f" {step} ({sigma:.3f}) " for step, sigma in enumerate(turbo["sigmas"][1:-1], 1)]
