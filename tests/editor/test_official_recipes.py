"""The pack's templates sample each model as ComfyUI's own template for it does.

ComfyUI's templates (the ``comfyui-workflow-templates`` packages its ``requirements.txt`` pins, installed with it)
are the recipes people run. Each of the pack's templates names the one it follows (``OFFICIAL``), and every sampler
of the pack's template that runs the model as the recipe has it (the uncached and the cached branch, each expert of
Wan 2.2; not the fewer-steps branch, whose step count is the point) must sample what ComfyUI's does with the same
model file: steps, CFG, sampler, scheduler, shift, LoRAs on the model, Flux guidance, the steps each expert takes.
ComfyUI's side is read from the installed JSON as shipped (switches as set, bypassed branches marked:
``devkit/official_templates.py``). Every deliberate difference is a row of ``DIFFERENCES`` with both values and
the reason, so a change on either side fails here until it is decided again.

ComfyUI must be there (its requirements name the package and its version); the package missing from ComfyUI's
Python fails, never skips.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable

import pytest

from devkit import official_templates
from devkit.official_templates import Recipe, Template

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "example_workflows"
FIELDS = ("steps", "cfg", "sampler", "scheduler", "shift", "loras", "guidance", "steps_range", "bypassed")


@dataclasses.dataclass(frozen=True)
class Official:
    template: str                                   # ComfyUI's template id
    # Which of its samplers on the pack's model file, where it has more than one (LTX-2's two stages).
    choose: Callable[[Recipe], bool] = lambda recipe: True


KREA2_TURBO = Official("image_krea2_turbo_t2i")
OFFICIAL = {
    "krea2_turbo_compare.json": KREA2_TURBO,
    "krea2_turbo_forecast_compare.json": KREA2_TURBO,
    "krea2_turbo_cachedit.json": KREA2_TURBO,
    "krea2_diffusers_cachedit.json": KREA2_TURBO,
    "flux1_dev_compare.json": Official("flux_dev_full_text_to_image"),
    "flux2_klein_compare.json": Official("image_flux2_klein_text_to_image"),
    "qwen_image_compare.json": Official("image_qwen_image"),
    "zimage_turbo_compare.json": Official("image_z_image_turbo"),
    "chroma_compare.json": Official("image_chroma_text_to_image"),
    "wan22_t2v_compare.json": Official("video_wan2_2_14B_t2v"),
    "hunyuan_video15_t2v_compare.json": Official("video_hunyuan_video_1.5_720p_t2v"),
    "ltxv_t2v_compare.json": Official("ltxv_text_to_video"),
    # Its first stage: the second (3 steps on ManualSigmas) adds the distilled LoRA to upscale.
    "ltx2_t2v_compare.json": Official("video_ltx2_t2v", choose=lambda recipe: not recipe.loras),
    "minimax_h3_t2v_compare.json": Official("video_minimax_h3_t2v"),
    "ernie_image_compare.json": Official("image_ernie_image"),
    "ernie_image_turbo_compare.json": Official("image_ernie_image_turbo"),
}
# Templates with no ComfyUI template to follow, and why.
NO_OFFICIAL = {
    "krea2_raw_cachedit.json": "ComfyUI ships no Krea-2 Raw template (its Krea-2 templates are Turbo's)",
    "krea2_raw_forecast_compare.json": "ComfyUI ships no Krea-2 Raw template (its Krea-2 templates are Turbo's)",
}

# (pack template, field) -> (ComfyUI's value, the pack's value, why). Nothing else may differ.
DIFFERENCES = {
    # The compare templates sample all three branches with a KSampler, whose schedulers are ComfyUI's named ones:
    # a template whose own scheduler is a node of its model's gets `simple` at the model's own shift.
    ("flux2_klein_compare.json", "scheduler"): ("Flux2Scheduler", "simple", "a KSampler takes no Flux2Scheduler"),
    ("ltxv_t2v_compare.json", "scheduler"): ("LTXVScheduler", "simple", "a KSampler takes no LTXVScheduler"),
    ("ltx2_t2v_compare.json", "scheduler"): ("LTXVScheduler", "simple", "a KSampler takes no LTXVScheduler"),
    # ComfyUI's Flux.2 Klein template holds the base model (20 steps, CFG 5) and the distilled one (4 steps, CFG 1),
    # the distilled subgraph bypassed as shipped; the pack's follows the distilled branch, the model people run
    # for speed (and the one its `slow` mask is set for).
    ("flux2_klein_compare.json", "bypassed"): (True, False, "the distilled branch, off as shipped"),
    # ComfyUI's Flux.1 dev template sets no guidance: the model's default applies, 3.5 (ComfyUI's Flux
    # conditioning); the pack's shows that value on a FluxGuidance node.
    ("flux1_dev_compare.json", "guidance"): (None, 3.5, "the model's default guidance, shown"),
}


def installed_templates():
    try:
        return official_templates.templates_package_version()
    except Exception as error:   # PackageNotFoundError: the package is not in this Python
        pytest.fail(f"comfyui-workflow-templates is not installed in the Python running the tests: ComfyUI's "
                    f"requirements.txt installs it (pip install -r requirements.txt in ComfyUI's venv): {error!r}")


def pinned_version(comfy_root: Path) -> str:
    found = re.search(r"^comfyui-workflow-templates==(\S+)", (comfy_root / "requirements.txt").read_text(), re.M)
    assert found, "ComfyUI's requirements.txt no longer pins comfyui-workflow-templates"
    return found.group(1)


def test_the_installed_templates_are_the_ones_comfyui_pins(comfy_root):
    assert installed_templates() == pinned_version(comfy_root)


def test_every_template_follows_an_official_recipe_or_says_why_not():
    shipped = {path.name for path in EXAMPLES.glob("*.json")}
    assert shipped == set(OFFICIAL) | set(NO_OFFICIAL) and not set(OFFICIAL) & set(NO_OFFICIAL)
    assert {name for name, _ in DIFFERENCES} <= set(OFFICIAL)


def recipe_branches(name: str) -> list[Recipe]:
    """The samplers of the pack's template that run the recipe: all of a plain one's, a compare template's uncached
    and cached branches (each expert's)."""
    recipes = Template.read(EXAMPLES / name).recipes()
    if len(recipes) == 1:
        return recipes
    branches = [r for r in recipes if r.title and re.search(r"\((uncached|Cache-DiT)\)$", r.title)]
    # Every sampler but the fewer-steps branch's (a third of them: one per expert).
    assert branches and len(branches) == len(recipes) - len(recipes) // 3, [r.title for r in recipes]
    return branches


def as_run(recipe: Recipe) -> Recipe:
    """A KSamplerAdvanced's end past the last step runs to the last step."""
    if recipe.steps_range is None:
        return recipe
    start, end = recipe.steps_range
    return dataclasses.replace(recipe, steps_range=(start, min(end, recipe.steps)))


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_the_template_samples_as_comfyuis_own_does(comfy_root, name):
    installed_templates()
    official = OFFICIAL[name]
    theirs = Template.load(official.template).recipes()
    for ours in map(as_run, recipe_branches(name)):
        same_model = [r for r in theirs if r.model == ours.model and official.choose(r)]
        assert len(same_model) == 1, (f"{name} samples {ours.model}; {official.template} samples "
                                      f"{sorted({r.model for r in theirs})} ({len(same_model)} matching)")
        recipe = as_run(same_model[0])
        for field in FIELDS:
            their_value, our_value = getattr(recipe, field), getattr(ours, field)
            if (name, field) in DIFFERENCES:
                expected_theirs, expected_ours, why = DIFFERENCES[(name, field)]
                assert (their_value, our_value) == (expected_theirs, expected_ours), (
                    f"{name}: the deliberate difference in {field} ({why}) is no longer "
                    f"{expected_theirs!r} (ComfyUI) against {expected_ours!r} (the pack): now {their_value!r} "
                    f"against {our_value!r}")
            else:
                assert our_value == their_value, (f"{name} ({ours.title}): {field} {our_value!r}, ComfyUI's "
                                                  f"{official.template}: {their_value!r}")
