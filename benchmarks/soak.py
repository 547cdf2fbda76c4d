"""Soak: one real ComfyUI server (CPU) taking hundreds of mixed prompts, as a server that runs all day does.

A seeded plan (the same prompts, in the same order, for the same ``--seed``) mixes Krea-2 and three
other families (Wan 2.1, Flux.1 and ERNIE-Image, tiny seeded checkpoints from ``devkit/``; ERNIE-Image's
loaded at its size by the test node pack's ``Krea2TestSizedUNETLoader``, since ComfyUI builds it only at
8B, and its forward routed through the nodes' own wrapper, unlike the others'), CFG 1, batched CFG
and split CFG (a negative prompt that cannot batch with the positive), the DBCache node with step
masks, thresholds and calibrators, caching off, no node, the Spectrum forecasting node, a few
interrupts (``POST /interrupt`` while the prompt samples), a few bad inputs (each must be refused
with HTTP 400 naming the input), model switches and ``POST /free`` (unload models and free memory)
between some prompts. The server runs ComfyUI's classic cache (the last prompt's outputs only), so
every switch of family loads that family's model again from its file, as a server without RAM to
keep every model does.

It reports:

- every prompt's status (counts by status) and, for each prompt with a cache node, that the stats
  record of that very prompt is on ``GET /krea2_cachedit/stats``;
- the server process's RSS after every prompt, and at rest (after ``/free``, every ``--rest-every``
  prompts): RSS and the tensors alive in the process after a full garbage collection (the test
  nodes' ``/krea2_test/tensor_memory``; torch keeps no count of CPU allocations, so that is the
  figure of what torch holds on the CPU; with CUDA, ``torch.cuda.memory_allocated`` as well). The
  verdict: at rest, from the end of the warm-up to the end, RSS grows less than ``--rss-margin-mb``
  and live tensors less than ``--tensor-margin-mb``;
- the recent-runs store's size (records and bytes of the stats route) over time: bounded by its limit;
- a sample of prompts run again alone at the end (after ``/free``), their latents compared bit for bit
  with what the soak saved, and their cached steps with the soak's record;
- the error answers (the 400 texts of the bad inputs).

    python -m benchmarks.soak                       # 300 prompts, JSON to benchmarks/results/soak.json
    python -m benchmarks.soak --prompts 60 --budget 600 --json /tmp/soak.json --markdown /tmp/soak.md

Run it with ComfyUI's Python (``~/comfy/ComfyUI/.venv/bin/python``): it builds the checkpoints with torch.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import json
import platform
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from devkit.comfy_harness import FREE, STATS_ROUTE, TENSOR_ROUTE, ComfyServer, find_comfyui, prompt_error
from devkit.comfy_models import FAMILY_MODELS, make_ernie_image_checkpoint, make_family_checkpoint  # loads the pack
from devkit.family_prompts import FAMILIES, family_prompt
from devkit.krea2_prompts import TINY_MODEL, with_forecast
from devkit.krea2_synthetic import Krea2Shape, save_native_checkpoint

BENCH_DIR = Path(__file__).resolve().parent

# family -> share of the prompts that sample
SOAK_FAMILIES = {"krea2": 0.45, "wan": 0.2, "flux1": 0.2, "ernie_image": 0.15}
STORE_LIMIT = 50            # the recent-runs store keeps this many records (nodes/routes.py RecentRuns)
OFF = {"residual_diff_threshold": 0.0, "steps_mask": "none"}
INTERRUPT_STEPS = 400       # long enough to be interrupted while it samples
INTERRUPT_AFTER_S = 1.0     # how long after the prompt starts the interrupt is sent
INTERRUPT_EVERY = 30        # one prompt in this many is interrupted
BAD_EVERY = 20              # one prompt in this many has a bad input
SIZE = 32                   # the latent's width and height (Wan: 5 frames of it)

# Bad inputs: (what, node input, value, the node) on a Krea-2 prompt; each must be refused at queue
# time (HTTP 400) with an error that names the input.
BAD_INPUTS = (
    ("negative threshold", "residual_diff_threshold", -0.5, "dbcache"),
    ("unknown steps_mask", "steps_mask", "turbo", "dbcache"),
    ("non-finite threshold", "residual_diff_threshold", float("nan"), "dbcache"),
    ("unknown calibrator", "calibrator", "euler", "dbcache"),
    ("taylorseer order out of range", "taylorseer_order", 9, "dbcache"),
    ("unknown forecast preset", "preset", "fastest", "forecast"),
)


@dataclasses.dataclass
class Item:
    """One entry of the plan: a prompt to run ("run"), interrupt ("interrupt") or have refused ("bad")."""
    index: int
    kind: str
    family: str
    cfg_mode: str          # "cfg1", "batched", "split"
    node: str              # "none", "dbcache", "off", "forecast"
    settings: dict         # the node's inputs (dbcache) or {"preset": ...} (forecast)
    steps: int
    seed: int
    bad: tuple | None = None      # the BAD_INPUTS entry
    free_after: bool = False      # POST /free (unload models, free memory) after it

    def label(self) -> str:
        what = {"none": "no node", "off": "caching off"}.get(self.node, self.node)
        if self.node == "dbcache":
            what += " " + ",".join(f"{k}={v}" for k, v in sorted(self.settings.items()))
        elif self.node == "forecast":
            what += f" {self.settings['preset']}"
        return f"{self.family} {self.cfg_mode} {self.steps} steps {what}"

    def prompt(self) -> dict:
        cfg = 1.0 if self.cfg_mode == "cfg1" else 3.5
        neg_tokens = FAMILIES[self.family].split_tokens if self.cfg_mode == "split" else 8
        cache = None if self.node == "none" else (OFF if self.node == "off" else
                                                   (self.settings if self.node == "dbcache" else {}))
        prompt = family_prompt(self.family, cfg=cfg, steps=self.steps, seed=self.seed, neg_tokens=neg_tokens,
                               cache=cache, prefix=f"soak_{self.index:04d}")
        prompt["4"]["inputs"].update(width=SIZE, height=SIZE)
        if self.node == "forecast":
            with_forecast(prompt, self.settings["preset"])
        if self.bad is not None:
            _, name, value, _ = self.bad
            prompt["5"]["inputs"][name] = value
        return prompt


def _dbcache_settings(rng: random.Random) -> dict:
    settings = {"residual_diff_threshold": rng.choice([0.08, 0.24, 0.5]),
                "steps_mask": rng.choice(["none", "none", "slow", "medium", "fast", "ultra"])}
    calibrator = rng.choice(["none", "none", "taylorseer", "foca", "dmd"])
    settings["calibrator"] = calibrator
    if calibrator == "taylorseer":
        settings["taylorseer_order"] = rng.choice([1, 2])
    elif calibrator == "dmd":
        settings["dmd_history"] = rng.choice([4, 6])
    return settings


def make_plan(count: int, seed: int = 0) -> list[Item]:
    """``count`` items, the same for the same seed: an interrupt every ``INTERRUPT_EVERY`` and a bad
    input every ``BAD_EVERY`` prompts (the bad inputs in turn), the rest sampling, the family, CFG mode,
    node and its settings drawn per prompt; ``/free`` after about one in twelve."""
    rng = random.Random(seed)
    families, weights = zip(*SOAK_FAMILIES.items())
    plan = []
    for index in range(count):
        family = rng.choices(families, weights)[0]
        cfg_mode = rng.choice(["cfg1", "batched", "split"])
        steps = rng.choice([4, 6, 8, 8])
        item_seed = rng.randrange(1 << 20)
        if index % INTERRUPT_EVERY == INTERRUPT_EVERY // 2:
            item = Item(index, "interrupt", family, cfg_mode, "dbcache", {"steps_mask": "none"}, INTERRUPT_STEPS,
                        item_seed)
        elif index % BAD_EVERY == BAD_EVERY // 3:
            bad = BAD_INPUTS[(index // BAD_EVERY) % len(BAD_INPUTS)]
            settings = {"preset": "turbo_5_of_8"} if bad[3] == "forecast" else {}
            item = Item(index, "bad", "krea2", "cfg1", bad[3], settings, 8, item_seed, bad=bad)
        else:
            node = rng.choices(["none", "dbcache", "off", "forecast"], [0.12, 0.6, 0.13, 0.15])[0]
            if node == "forecast":
                steps, settings = 8, {"preset": rng.choice(["turbo_5_of_8", "turbo_4_of_8"])}
            elif node == "dbcache":
                settings = _dbcache_settings(rng)
            else:
                settings = {}
            item = Item(index, "run", family, cfg_mode, node, settings, steps, item_seed)
        item.free_after = rng.random() < 1 / 12
        plan.append(item)
    return plan


# --- the server -------------------------------------------------------------------------

def start_server(comfy_root: Path, base: Path) -> ComfyServer:
    """One ComfyUI (CPU, classic cache) with the tiny Krea-2, Wan, Flux.1 and ERNIE-Image checkpoints."""
    ComfyServer.prepare_base_dir(base)
    models = base / "models" / "diffusion_models"
    save_native_checkpoint(models / TINY_MODEL, Krea2Shape(), seed=0)
    for family in SOAK_FAMILIES:
        if family == "ernie_image":   # its size in its metadata, for the test loader
            make_ernie_image_checkpoint(comfy_root, models / FAMILY_MODELS[family], seed=1)
        elif family != "krea2":
            make_family_checkpoint(comfy_root, family, models / FAMILY_MODELS[family], seed=1)
    return ComfyServer(comfy_root, base, extra_args=["--cache-classic"]).start()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def store_size(server: ComfyServer) -> dict:
    with urllib.request.urlopen(server.url + STATS_ROUTE, timeout=30) as response:
        body = response.read()
    return {"records": len(json.loads(body)["runs"]), "bytes": len(body)}


def at_rest(server: ComfyServer) -> dict:
    """``/free`` (unload models, free memory: ComfyUI's worker also drops its cached outputs and
    collects garbage), then the server's RSS and the tensors alive in it."""
    server.free()
    time.sleep(1.0)   # the worker took the flags; let it finish unloading and collecting
    server.get(TENSOR_ROUTE)
    tensors = server.get(TENSOR_ROUTE)
    return {"rss_mb": round(rss_mb(server.process.pid), 2), "tensor_mb": round(tensors["bytes"] / 2**20, 3),
            "tensor_by_device": tensors["by_device"], "cuda_allocated": tensors["cuda_allocated"]}


def _interrupted(entry: dict) -> bool:
    return any(kind == "execution_interrupted" for kind, _ in entry["status"].get("messages", []))


def run_item(server: ComfyServer, item: Item) -> dict:
    """Run one plan item; its row: status, seconds, prompt id, the record's summary or the 400 answer."""
    prompt = item.prompt()
    row = {"index": item.index, "kind": item.kind, "family": item.family, "cfg_mode": item.cfg_mode,
           "node": item.node, "steps": item.steps, "label": item.label()}
    start = time.perf_counter()
    if item.kind == "bad":
        what, name, value, _ = item.bad
        try:
            answer, text = server.refusal(prompt)
        except AssertionError as error:
            row.update(status="not refused", detail=str(error)[:500])
        else:
            errors = [e for node in answer.get("node_errors", {}).values() for e in node.get("errors", [])]
            named = [e for e in errors if e.get("extra_info", {}).get("input_name") == name
                     or name in e.get("details", "") or name in e.get("message", "")]
            row.update(status="refused", answer={"case": what, "input": name, "value": repr(value), "http": 400,
                                                 "type": answer.get("error", {}).get("type"),
                                                 "message": answer.get("error", {}).get("message"),
                                                 "node_errors": errors, "names_input": bool(named)})
        row["seconds"] = round(time.perf_counter() - start, 3)
        return row
    prompt_id = server.queue(prompt)
    row["prompt_id"] = prompt_id
    if item.kind == "interrupt":
        deadline = time.time() + 120
        while time.time() < deadline:
            if any(entry[1] == prompt_id for entry in server.get("/queue")["queue_running"]):
                break
            time.sleep(0.05)
        time.sleep(INTERRUPT_AFTER_S)
        server.post("/interrupt", {"prompt_id": prompt_id})
    entry = server.wait(prompt_id, timeout=600)
    row["seconds"] = round(time.perf_counter() - start, 3)
    error = prompt_error(entry)
    if item.kind == "interrupt":
        row["status"] = "interrupted" if _interrupted(entry) else ("finished before the interrupt" if error is None
                                                                  else "error")
        if row["status"] == "error":
            row["detail"] = error
        return row
    if error is not None:
        row.update(status="error", detail=error)
        return row
    records = [r for r in server.get(STATS_ROUTE)["runs"] if r["prompt_id"] == prompt_id]
    expected = 0 if item.node == "none" else 1
    if len(records) != expected:
        row.update(status="wrong records", detail=f"{len(records)} stats records of this prompt, expected {expected}")
        return row
    if records:
        record = records[0]
        row["record"] = {"cached_steps": record["skipped_steps"], "calls": record["calls"], "steps": record["steps"]}
        if item.node == "off" and record["skipped_steps"]:
            row.update(status="cached with caching off", detail=str(record["skipped_steps"]))
            return row
    row["status"] = "success"
    row["latent"] = _latent_path(server, entry)
    return row


def _latent_path(server: ComfyServer, entry: dict) -> str:
    item = entry["outputs"]["7"]["latents"][0]
    return str(server.base_dir / "output" / item.get("subfolder", "") / item["filename"])


def _load_latent(path: str):
    from safetensors.torch import load_file

    return load_file(path)["latent_tensor"]


def rerun_alone(server: ComfyServer, plan: list[Item], rows: list[dict], count: int, seed: int) -> list[dict]:
    """``count`` successful prompts (drawn with ``seed``, spread over the soak) run again after ``/free``,
    one at a time: their latent against the soak's, bit for bit, and their cached steps."""
    done = [row for row in rows if row["status"] == "success"]
    rng = random.Random(seed + 1)
    chosen = sorted(rng.sample(done, min(count, len(done))), key=lambda row: row["index"])
    results = []
    for row in chosen:
        server.free()
        item = plan[row["index"]]
        prompt = item.prompt()   # a new nonce: ComfyUI samples it again (the nonce changes no tensor)
        for node in prompt.values():
            if node["class_type"] == "SaveLatent":
                node["inputs"]["filename_prefix"] = f"soak_rerun_{item.index:04d}"
        prompt_id = server.queue(prompt)
        entry = server.wait(prompt_id, timeout=600)
        error = prompt_error(entry)
        result = {"index": item.index, "label": item.label(), "prompt_id": prompt_id}
        if error is not None:
            result.update(equal=False, detail=error)
        else:
            import torch

            before, after = _load_latent(row["latent"]), _load_latent(_latent_path(server, entry))
            result["equal"] = bool(before.dtype == after.dtype and before.shape == after.shape
                                   and torch.equal(before, after))
            if not result["equal"] and before.shape == after.shape:
                result["max_abs_diff"] = float((before.float() - after.float()).abs().max())
            if "record" in row:
                records = [r for r in server.get(STATS_ROUTE)["runs"] if r["prompt_id"] == prompt_id]
                result["cached_steps"] = records[0]["skipped_steps"] if records else None
                result["same_cached_steps"] = result["cached_steps"] == row["record"]["cached_steps"]
                result["equal"] = result["equal"] and result["same_cached_steps"]
        results.append(result)
    return results


# --- the soak ---------------------------------------------------------------------------

def soak(comfy_root: Path, base: Path, prompts: int = 300, budget: float = 1800.0, seed: int = 0,
         rest_every: int = 15, warmup: int | None = None, reruns: int = 12, rss_margin_mb: float = 40.0,
         tensor_margin_mb: float = 2.0, log=print) -> dict:
    """Run the soak; the report (see ``verdicts``)."""
    plan = make_plan(prompts, seed)
    warmup = max(rest_every, prompts // 5) if warmup is None else warmup
    started = time.perf_counter()
    server = start_server(comfy_root, base)
    try:
        pid = server.process.pid
        rest = [{"after": 0, **at_rest(server)}]
        log(f"server up (pid {pid}): RSS {rest[0]['rss_mb']:.1f} MB, live tensors {rest[0]['tensor_mb']:.2f} MB")
        rows, trace, stopped_at = [], [], None
        soak_start = time.perf_counter()
        for item in plan:
            if time.perf_counter() - soak_start > budget:
                stopped_at = item.index
                log(f"budget of {budget:.0f} s spent: stopped after {item.index} of {len(plan)} prompts")
                break
            row = run_item(server, item)
            rows.append(row)
            trace.append({"after": item.index + 1, "rss_mb": round(rss_mb(pid), 2), **store_size(server)})
            if row["status"] not in ("success", "refused", "interrupted"):
                log(f"  [{item.index}] {row['label']}: {row['status']}: {row.get('detail', '')[:300]}")
            done = item.index + 1
            if done % rest_every == 0 or done == len(plan):
                rest.append({"after": done, **at_rest(server)})
                log(f"{done:4d}/{len(plan)} prompts, {time.perf_counter() - soak_start:6.0f} s: at rest RSS "
                    f"{rest[-1]['rss_mb']:.1f} MB, live tensors {rest[-1]['tensor_mb']:.2f} MB, store "
                    f"{trace[-1]['records']} records ({trace[-1]['bytes'] / 1024:.0f} KiB)")
            elif item.free_after:
                server.post("/free", FREE)
        soak_seconds = time.perf_counter() - soak_start
        rerun_results = rerun_alone(server, plan, rows, reruns, seed)
        return report(plan, rows, trace, rest, rerun_results, warmup=warmup, rss_margin_mb=rss_margin_mb,
                      tensor_margin_mb=tensor_margin_mb, soak_seconds=soak_seconds,
                      total_seconds=time.perf_counter() - started, stopped_at=stopped_at, seed=seed,
                      rest_every=rest_every, budget=budget)
    finally:
        server.stop()


def _growth(rest: list[dict], warmup: int, key: str) -> dict:
    """``key`` at rest: the first sample at or after the warm-up, the last, and the change between them."""
    after = [sample for sample in rest if sample["after"] >= warmup]
    if len(after) < 2:
        return {"warm": None, "end": None, "growth": None, "samples": len(after)}
    warm, end = after[0][key], after[-1][key]
    return {"warm": warm, "end": end, "growth": round(end - warm, 3), "peak_growth": round(max(s[key] for s in after)
                                                                                         - warm, 3),
            "samples": len(after)}


def report(plan, rows, trace, rest, reruns, *, warmup, rss_margin_mb, tensor_margin_mb, soak_seconds,
           total_seconds, stopped_at, seed, rest_every, budget) -> dict:
    statuses: dict[str, int] = {}
    for row in rows:
        key = f"{row['kind']}: {row['status']}"
        statuses[key] = statuses.get(key, 0) + 1
    mix = {field: {} for field in ("family", "cfg_mode", "node")}
    for row in rows:
        if row["kind"] == "run":
            for field in mix:
                mix[field][row[field]] = mix[field].get(row[field], 0) + 1
    switches = sum(1 for a, b in zip(rows, rows[1:]) if a["kind"] != "bad" and b["kind"] != "bad"
                   and a["family"] != b["family"])
    rss, tensors = _growth(rest, warmup, "rss_mb"), _growth(rest, warmup, "tensor_mb")
    store_max = max((t["records"] for t in trace), default=0)
    answers = [row["answer"] for row in rows if "answer" in row]
    expected = {"run": "success", "interrupt": ("interrupted", "finished before the interrupt"), "bad": "refused"}
    unexpected = [row for row in rows if row["status"] not in
                  (expected[row["kind"]] if isinstance(expected[row["kind"]], tuple) else (expected[row["kind"]],))]
    verdicts = {
        "statuses": not unexpected,
        "rss_flat": rss["growth"] is not None and rss["growth"] <= rss_margin_mb,
        "tensors_flat": tensors["growth"] is not None and tensors["growth"] <= tensor_margin_mb,
        "store_bounded": store_max <= STORE_LIMIT,
        "reruns_equal": bool(reruns) and all(r["equal"] for r in reruns),
        "errors_name_input": bool(answers) and all(a["names_input"] for a in answers),
    }
    return {
        "date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {platform.processor() or ''}"
        .strip(", "), "seed": seed, "prompts_planned": len(plan), "prompts_run": len(rows), "stopped_at": stopped_at,
        "budget_s": budget, "soak_seconds": round(soak_seconds, 1), "total_seconds": round(total_seconds, 1),
        "warmup_prompts": warmup, "rest_every": rest_every, "statuses": statuses, "mix": mix,
        "family_switches": switches, "frees": sum(1 for i in plan[:len(rows)] if i.free_after) + len(rest),
        "rss_mb": {"start": rest[0]["rss_mb"], **rss, "margin": rss_margin_mb,
                   "running_max": max((t["rss_mb"] for t in trace), default=None)},
        "tensor_mb": {"start": rest[0]["tensor_mb"], **tensors, "margin": tensor_margin_mb,
                      "cuda_allocated": rest[-1]["cuda_allocated"]},
        "store": {"limit": STORE_LIMIT, "max_records": store_max, "end_records": trace[-1]["records"] if trace else 0,
                  "end_bytes": trace[-1]["bytes"] if trace else 0,
                  "max_bytes": max((t["bytes"] for t in trace), default=0)},
        "reruns": reruns, "error_answers": answers,
        "unexpected": [{k: row.get(k) for k in ("index", "label", "status", "detail")} for row in unexpected],
        "verdicts": verdicts, "passed": all(verdicts.values()),
        "rest": rest, "trace": trace, "rows": rows,
    }


def verdict_line(result: dict) -> str:
    rss, tensors = result["rss_mb"], result["tensor_mb"]
    flat = result["verdicts"]["rss_flat"] and result["verdicts"]["tensors_flat"]
    return (f"VERDICT {'PASS' if result['passed'] else 'FAIL'}: memory {'flat' if flat else 'NOT flat'} after "
            f"{result['warmup_prompts']} warm-up prompts (RSS {rss['growth']:+.1f} MB, margin {rss['margin']:.0f}; "
            f"live tensors {tensors['growth']:+.2f} MB, margin {tensors['margin']:.0f}); store "
            f"{result['store']['max_records']}/{result['store']['limit']} records; statuses "
            f"{'as expected' if result['verdicts']['statuses'] else 'UNEXPECTED'}; re-runs "
            f"{sum(r['equal'] for r in result['reruns'])}/{len(result['reruns'])} bit-identical; errors "
            f"{'name their input' if result['verdicts']['errors_name_input'] else 'DO NOT all name their input'}")


def markdown(result: dict) -> str:
    rss, tensors, store = result["rss_mb"], result["tensor_mb"], result["store"]
    mix = "; ".join(", ".join(f"{k} {v}" for k, v in sorted(m.items())) for m in result["mix"].values())
    lines = [
        "| measure | value |", "|---|---|",
        f"| prompts | {result['prompts_run']} of {result['prompts_planned']} planned (seed {result['seed']}), "
        f"{result['soak_seconds']:.0f} s ({result['total_seconds']:.0f} s with setup and re-runs) |",
        f"| statuses | {', '.join(f'{k} {v}' for k, v in sorted(result['statuses'].items()))} |",
        f"| sampling prompts by family; CFG; node | {mix} |",
        f"| family switches (model reloads); `/free` calls | {result['family_switches']}; {result['frees']} |",
        f"| RSS at rest: start / after warm-up ({result['warmup_prompts']} prompts) / end | {rss['start']:.1f} / "
        f"{rss['warm']:.1f} / {rss['end']:.1f} MB ({rss['growth']:+.1f} MB; peak {rss['peak_growth']:+.1f}; "
        f"margin {rss['margin']:.0f} MB) |",
        f"| RSS while running, highest | {rss['running_max']:.1f} MB |",
        f"| live tensors at rest: start / after warm-up / end | {tensors['start']:.2f} / {tensors['warm']:.2f} / "
        f"{tensors['end']:.2f} MB ({tensors['growth']:+.2f} MB; margin {tensors['margin']:.0f} MB) |",
        f"| recent-runs store: most records / at the end | {store['max_records']} (limit {store['limit']}) / "
        f"{store['end_records']} ({store['end_bytes'] / 1024:.0f} KiB; most {store['max_bytes'] / 1024:.0f} KiB) |",
        f"| re-run alone, bit-identical (latent and cached steps) | {sum(r['equal'] for r in result['reruns'])} of "
        f"{len(result['reruns'])} |",
        f"| verdict | {verdict_line(result).removeprefix('VERDICT ')} |",
        "", "| bad input | HTTP | error answer |", "|---|---|---|",
    ]
    seen = set()
    for answer in result["error_answers"]:
        if answer["case"] in seen:
            continue
        seen.add(answer["case"])
        # ComfyUI repeats a failed validator's answer once per input of the node: its first one, and how many.
        errors = answer["node_errors"]
        details = (f"{errors[0].get('details')} ({len(errors)} node errors)" if errors else answer["message"])
        lines.append(f"| {answer['case']} (`{answer['input']}` = `{answer['value']}`) | {answer['http']} | "
                     f"{details.replace('|', '/')} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=300, help="prompts in the plan (default 300)")
    parser.add_argument("--budget", type=float, default=1800.0, help="seconds of prompts at most (default 1800)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rest-every", type=int, default=15, help="prompts between memory samples at rest")
    parser.add_argument("--reruns", type=int, default=12, help="prompts run again alone at the end")
    parser.add_argument("--rss-margin-mb", type=float, default=40.0)
    parser.add_argument("--tensor-margin-mb", type=float, default=2.0)
    parser.add_argument("--json", type=Path, default=BENCH_DIR / "results" / "soak.json")
    parser.add_argument("--markdown", type=Path, default=BENCH_DIR / "results" / "soak.md")
    args = parser.parse_args(argv)
    comfy_root = find_comfyui()
    if comfy_root is None:
        sys.exit("no ComfyUI found (set COMFYUI_PATH)")
    with tempfile.TemporaryDirectory(prefix="krea2_soak_") as base:
        result = soak(comfy_root, Path(base), prompts=args.prompts, budget=args.budget, seed=args.seed,
                      rest_every=args.rest_every, reruns=args.reruns, rss_margin_mb=args.rss_margin_mb,
                      tensor_margin_mb=args.tensor_margin_mb)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    table = markdown(result)
    args.markdown.write_text(table + "\n")
    print(table)
    print(verdict_line(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
