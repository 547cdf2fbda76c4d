"""The distilled Turbo proxy: the trained proxy taught to sample in 8 steps at CFG 1 what it samples
in 52 steps at CFG 3.5, as Krea-2 Turbo is distilled from Krea-2 Raw.

Krea-2 Turbo folds the guidance into the model and is trained to finish in 8 steps at CFG 1; a base
model sampled at 8 steps and CFG 1 moves along another trajectory (its features change less per step
and it lands on the unguided image). Figures of the few-step regime rest on this proxy instead.

**The distillation: regression on the teacher's trajectory at the student's sigmas.** The teacher is
the trained proxy (``krea2_proxy.py``) sampled as the Raw regime samples it: ComfyUI's ``simple``
schedule at 52 steps, Euler, CFG 3.5 (cond and uncond in one batch). Euler moves in straight lines
between its sigmas, so the teacher's state at any sigma is the linear interpolation of its two states
around it: that gives the teacher's states at the 8-step schedule's sigmas without running the
teacher on another grid, and its last state is exactly the Raw image. The student (initialised from
the teacher) learns, at each of the 8 steps, the velocity that takes Euler from the teacher's state
at this sigma to its state at the next: one Euler step of the student per segment of the teacher's
trajectory, at CFG 1 (the cond only, as ComfyUI calls a CFG-1 model). Its loss is the error of the
next state (the velocity's error times the step's length), so a long step counts for what it moves.
Tried and dropped: starting half of the later batches from the student's own 8-step states (with the
velocity back to the teacher's next state), so it would learn to steer back: on held-out seeds its
image went from 13.9 to 22.1 and 17.1 MAE/255 as those states joined, where teacher states alone went
on to 13.2.

Why this one on two CPU cores: the teacher runs once per trajectory (104 model calls at batch 2), every
training sample is one forward and backward at one sigma, and nothing else is trained (no critic, no
second model, no schedule of teachers). A consistency or shortcut objective needs the model's own
targets at two times per sample and many more iterations to settle; reflow needs a full retraining of
the flow on teacher pairs. The price: the student knows the 8-step sigmas; at other step counts it
samples what its weights between those sigmas give, as a model distilled for 8 steps does.

Built once and cached (or taken from its pinned build) as the proxy is, in a folder of its own
(``turbo-proxy-<build id>``): the build id covers this file's recipe, its settings and the teacher's
build id (``proxy_build``), so a change here rebuilds only this proxy and a changed teacher rebuilds
both. The build record holds the held-out check: on seeds no training
trajectory used, the MAE/255 of the student's 8-step CFG-1 image and of the teacher's own 8-step CFG-1
image against the teacher's 52-step CFG-3.5 image. It shares the teacher's codec. Dynamics on
procedural images, not Krea-2 Turbo quality.

``python -m devkit.krea2_turbo_proxy build`` (with ComfyUI's interpreter) distils it; ``ensure_turbo_proxy()``
returns the cached build, distilling it first (and training the teacher first) when missing.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch

from devkit import krea2_proxy as teacher_proxy

HERE = Path(__file__).resolve()

CHECKPOINT_NAME = "krea2_turbo_proxy.safetensors"
BUILD_INFO_NAME = teacher_proxy.BUILD_INFO_NAME


@dataclasses.dataclass(frozen=True)
class TurboSettings:
    steps: int = 8               # the student's schedule: ComfyUI's ``simple`` at this many steps, CFG 1
    teacher_steps: int = 52      # the teacher's: the Raw regime's graph
    teacher_cfg: float = 3.5
    # Teacher trajectories to learn from (classes in turn, one noise seed each). With 96 the student came
    # within 7.0 MAE/255 of the teacher on them and 13.2 on held-out seeds: more trajectories, not more
    # iterations, are what it lacked.
    trajectories: int = 160
    held_out: int = 32           # teacher trajectories of other seeds, only for the build record's check
    teacher_batch: int = 32      # trajectories per teacher batch (64 model inputs with the uncond)
    iterations: int = 300
    batch: int = 16
    lr: float = 2e-4
    lr_final: float = 1e-5
    warmup: int = 20
    seed: int = 7
    threads: int = 1


SETTINGS = TurboSettings()


# What is not the recipe (proxy_build.recipe_source): the cache and CLI plumbing, file names, this list.
NOT_RECIPE = ("HERE", "CHECKPOINT_NAME", "BUILD_INFO_NAME", "NOT_RECIPE", "KIND", "build_id", "cache_dir",
              "EXPECTED_BUILD_MINUTES", "is_built", "ensure_turbo_proxy", "main")
KIND = "turbo-proxy"


def build_id(settings: TurboSettings = SETTINGS) -> str:
    """This recipe's build id (see proxy_build); the teacher's build id is part of the recipe: a new
    teacher, a new student."""
    from devkit import proxy_build

    recipe = proxy_build.recipe_hash(HERE, NOT_RECIPE, dataclasses.asdict(settings), teacher_proxy.build_id())
    return proxy_build.build_id(KIND, recipe)


def cache_dir(settings: TurboSettings = SETTINGS) -> Path:
    """Beside the proxy's folder, named apart: the two builds never share or clear each other's files."""
    return teacher_proxy.cache_dir().parent / f"{KIND}-{build_id(settings)}"


# --- sampling as ComfyUI samples a Krea-2 ---------------------------------------------------------

def comfy_sigmas(steps: int) -> torch.Tensor:
    """ComfyUI's ``simple`` schedule of ``steps`` steps for Krea-2 (its model sampling and time shift)."""
    import comfy.model_base
    import comfy.samplers
    import comfy.supported_models

    config = comfy.supported_models.Krea2({"image_model": "krea2"})
    sampling = comfy.model_base.model_sampling(config, comfy.model_base.ModelType.FLUX)
    return comfy.samplers.calculate_sigmas(sampling, "simple", steps).float()


def guided_velocity(model, x: torch.Tensor, sigma: float, cond: torch.Tensor, cfg: float) -> torch.Tensor:
    """The model's velocity at ``sigma``; with ``cfg`` other than 1, cond and uncond (the zeroed
    conditioning) in one batch and combined as ComfyUI's CFG combines them (on the denoised latent,
    which is the same affine combination of the velocities)."""
    t = torch.full((x.shape[0],), float(sigma))
    if cfg == 1.0:
        return model(x, t, cond)
    both = model(torch.cat([x, x]), torch.cat([t, t]), torch.cat([cond, torch.zeros_like(cond)]))
    v_cond, v_uncond = both.chunk(2)
    return v_uncond + cfg * (v_cond - v_uncond)


@torch.no_grad()
def euler_states(model, noise: torch.Tensor, cond: torch.Tensor, sigmas: torch.Tensor, cfg: float) -> torch.Tensor:
    """(steps + 1, B, ...) the states of an Euler run from pure noise (ComfyUI's start at sigma 1)."""
    x = noise * sigmas[0]
    states = [x]
    for i in range(len(sigmas) - 1):
        x = x + (sigmas[i + 1] - sigmas[i]) * guided_velocity(model, x, float(sigmas[i]), cond, cfg)
        states.append(x)
    return torch.stack(states)


def states_at(states: torch.Tensor, sigmas: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
    """The Euler run's state at each ``wanted`` sigma: Euler moves in a straight line between its own
    sigmas, so a state between two of them is their linear interpolation."""
    out = []
    for sigma in wanted.tolist():
        i = int(torch.searchsorted(-sigmas, torch.tensor(-sigma), right=True)) - 1   # sigmas decrease
        i = min(max(i, 0), len(sigmas) - 2)
        a, b = float(sigmas[i]), float(sigmas[i + 1])
        share = 0.0 if a == b else (a - sigma) / (a - b)
        out.append(torch.lerp(states[i], states[i + 1], share))
    return torch.stack(out)


# --- the teacher's trajectories ---------------------------------------------------------------------

@dataclasses.dataclass
class Trajectories:
    labels: torch.Tensor   # (N,)
    noise: torch.Tensor    # (N, C, H, W)
    states: torch.Tensor   # (steps + 1, N, C, H, W): the teacher's states at the student's sigmas


def noise_of(count: int, seed: int, settings: teacher_proxy.ProxySettings) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    size = settings.latent_size
    return torch.randn((count, settings.channels, size, size), generator=generator)


def teacher_trajectories(teacher, count: int, seed: int, s: TurboSettings, conditions: torch.Tensor,
                         bar) -> Trajectories:
    labels = torch.arange(count) % len(teacher_proxy.CLASSES)
    noise = noise_of(count, seed, teacher_proxy.SETTINGS)
    fine, coarse = comfy_sigmas(s.teacher_steps), comfy_sigmas(s.steps)
    chunks = []
    for start in range(0, count, s.teacher_batch):
        part = slice(start, start + s.teacher_batch)
        states = euler_states(teacher, noise[part], conditions[labels[part]], fine, s.teacher_cfg)
        chunks.append(states_at(states, fine, coarse))
        bar.update(1)
    return Trajectories(labels, noise, torch.cat(chunks, dim=1))


# --- the distillation ------------------------------------------------------------------------------

def learning_rate(i: int, s: TurboSettings) -> float:
    if i < s.warmup:
        return s.lr * (i + 1) / s.warmup
    progress = (i - s.warmup) / max(1, s.iterations - s.warmup)
    return s.lr_final + (s.lr - s.lr_final) * 0.5 * (1 + math.cos(math.pi * progress))


def distil(student, data: Trajectories, s: TurboSettings, conditions: torch.Tensor, bar) -> list[float]:
    sigmas = comfy_sigmas(s.steps)
    steps_of = sigmas[1:] - sigmas[:-1]                       # (steps,) negative: sigma falls
    scale = float(steps_of.square().mean().sqrt())            # the loss in units of a typical step
    optimizer = torch.optim.AdamW(student.parameters(), lr=s.lr, betas=(0.9, 0.99), weight_decay=0.0)
    draw = torch.Generator().manual_seed(s.seed)
    losses = []
    count = data.labels.shape[0]
    for i in range(s.iterations):
        which = torch.randint(0, count, (s.batch,), generator=draw)
        step = torch.randint(0, s.steps, (s.batch,), generator=draw)
        start = data.states[step, which]
        target = data.states[step + 1, which]
        length = steps_of[step][:, None, None, None]
        velocity = student(start, sigmas[step], conditions[data.labels[which]])
        loss = ((start + length * velocity - target) / scale).square().mean()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(i, s)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        bar.update(1)
        if i % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-30:]) / len(losses[-30:]):.4f}")
    return losses


@torch.no_grad()
def held_out_check(student, teacher, held_out: Trajectories, s: TurboSettings, conditions: torch.Tensor,
                   codec) -> dict:
    """MAE/255 of the decoded images against the teacher's Raw image, on seeds no training trajectory used."""
    sigmas = comfy_sigmas(s.steps)
    cond = conditions[held_out.labels]
    reference = codec.decode(held_out.states[-1])
    student_final = euler_states(student.eval(), held_out.noise, cond, sigmas, 1.0)[-1]
    teacher_final = euler_states(teacher.eval(), held_out.noise, cond, sigmas, 1.0)[-1]

    def mae(latent):
        return round(float((codec.decode(latent) - reference).abs().mean()) * 255, 3)

    return {"seeds": f"{s.seed + 1000}: {held_out.labels.shape[0]} trajectories, classes in turn",
            "reference": f"the teacher, {s.teacher_steps} steps, CFG {s.teacher_cfg:g}",
            "student_8_steps_cfg1_mae_255": mae(student_final),
            "teacher_8_steps_cfg1_mae_255": mae(teacher_final)}


def build(comfy_root: Path, out_dir: Path, s: TurboSettings = SETTINGS, progress: bool = True) -> dict:
    from safetensors.torch import load_file, save_file
    from tqdm import tqdm

    teacher_build = teacher_proxy.ensure_proxy(comfy_root, quiet=not progress)
    krea2 = teacher_proxy._import_comfy(comfy_root)
    torch.set_num_threads(s.threads)
    torch.manual_seed(s.seed)
    started, cpu_started = time.perf_counter(), time.process_time()
    teacher = teacher_proxy.build_model(krea2, teacher_proxy.SETTINGS)
    teacher.load_state_dict(load_file(str(teacher_build.checkpoint)))
    teacher.eval()
    conditions = torch.cat([teacher_proxy.class_conditioning(k) for k in range(len(teacher_proxy.CLASSES))])

    batches = math.ceil(s.trajectories / s.teacher_batch) + math.ceil(s.held_out / s.teacher_batch)
    with tqdm(total=batches, desc="Turbo proxy: teacher trajectories", unit="batch", disable=not progress,
              mininterval=2.0, file=sys.stderr) as bar:
        data = teacher_trajectories(teacher, s.trajectories, s.seed, s, conditions, bar)
        held_out = teacher_trajectories(teacher, s.held_out, s.seed + 1000, s, conditions, bar)
    student = copy.deepcopy(teacher).train()
    with tqdm(total=s.iterations, desc="Turbo proxy: distilling", unit="it", disable=not progress,
              mininterval=2.0, file=sys.stderr) as bar:
        losses = distil(student, data, s, conditions, bar)
    check = held_out_check(student, teacher, held_out, s, conditions, teacher_build.codec)

    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in student.state_dict().items()}, str(out_dir / CHECKPOINT_NAME))
    info = {"generator_hash": build_id(s), "teacher": teacher_build.checkpoint.parent.name,
            "settings": dataclasses.asdict(s), "method": "regression on the teacher's trajectory at the 8-step sigmas",
            "wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(time.process_time() - cpu_started, 1),
            "first_loss": sum(losses[:10]) / 10, "final_loss": sum(losses[-30:]) / 30, "held_out": check,
            "weights_sha256": hashlib.sha256((out_dir / CHECKPOINT_NAME).read_bytes()).hexdigest(),
            "torch": torch.__version__}
    (out_dir / BUILD_INFO_NAME).write_text(json.dumps(info, indent=2))
    return info


# --- the cached build -------------------------------------------------------------------------------

EXPECTED_BUILD_MINUTES = 11


def is_built(settings: TurboSettings = SETTINGS) -> bool:
    return (cache_dir(settings) / BUILD_INFO_NAME).is_file()


def ensure_turbo_proxy(comfy_root: Path | None = None, quiet: bool = False) -> teacher_proxy.Proxy:
    """The distilled proxy (checkpoint, the teacher's codec, its build record); taken from the pinned
    build or, when there is none, distilled first (in ComfyUI's interpreter with a progress bar, after
    the teacher) when the cache has no build of this recipe."""
    from devkit import proxy_build

    folder = cache_dir()
    info = proxy_build.ensure_built(folder, CHECKPOINT_NAME, "devkit.krea2_turbo_proxy",
                                    f"Distilling the Turbo proxy once (about {EXPECTED_BUILD_MINUTES} minutes on 2 "
                                    f"CPU cores, after the proxy it learns from)", comfy_root, quiet)
    teacher = teacher_proxy.ensure_proxy(comfy_root, quiet=True)
    return teacher_proxy.Proxy(folder / CHECKPOINT_NAME, teacher.codec, info)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Distil the Turbo proxy into its cache folder.")
    parser.add_argument("command", choices=["build", "ensure", "path"])
    parser.add_argument("--comfyui", type=Path, help="the ComfyUI checkout whose model code runs it")
    parser.add_argument("--out", type=Path, help="build here instead of the cache folder (with overrides: trials)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a setting (a trial build; needs --out)")
    args = parser.parse_args(argv)
    if args.command == "path":
        print(cache_dir())
        return 0
    from devkit.comfy_harness import find_comfyui

    comfy_root = args.comfyui or find_comfyui()
    if args.command == "ensure":
        proxy = ensure_turbo_proxy(comfy_root)
        print(f"Turbo proxy: {proxy.checkpoint} (distilled in {proxy.info['wall_s']} s wall)", flush=True)
        return 0
    overrides = {}
    for item in args.set:
        name, value = item.split("=", 1)
        overrides[name] = type(getattr(SETTINGS, name))(value)
    settings = dataclasses.replace(SETTINGS, **overrides)
    if overrides and args.out is None:
        raise SystemExit("--set needs --out: the cache holds only builds of the generator's own settings")
    out = args.out or cache_dir()
    if args.out:
        info = build(comfy_root, out, settings)
    else:
        from devkit import proxy_build

        info = proxy_build.build_into(out, lambda work: build(comfy_root, work, settings))
    check = info["held_out"]
    print(f"Turbo proxy built in {out}: {info['wall_s']} s wall; held out, MAE/255 against the teacher's "
          f"{settings.teacher_steps}-step CFG {settings.teacher_cfg:g} image at {settings.steps} steps CFG 1: "
          f"student {check['student_8_steps_cfg1_mae_255']}, teacher {check['teacher_8_steps_cfg1_mae_255']}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
