"""LTXV through CacheDiTDBCache in the real server: what is LTXV's own.

LTXV runs the family scenario set (tests/families/test_family_scenarios_comfyui.py,
its harness in tests/support/family_harness.py: ComfyUI's ``LTXVConditioning`` in its graph, 4 blocks 128 wide sampling a
9-frame 64x64 video at 4 steps; the checkpoint written only when a test asks for ``ltxv_server``).

Its own: LTX-2 (``LTXAVModel``, a subclass with a loop of its own) resolves to its own entry, never LTXV's.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.comfyui


_LTX2_SCRIPT = """
import sys
sys.argv = ["ltx2_resolved", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import comfy.cli_args, comfy.ops
from devkit.comfy_harness import load_pack
load_pack()
from comfy.ldm.lightricks.av_model import LTXAVModel
from krea2_cachedit.adapters.families.registry import resolve
print(resolve(LTXAVModel(num_layers=1, device="meta", operations=comfy.ops.disable_weight_init)).family.name)
"""


def test_ltx_2_a_subclass_with_a_loop_of_its_own_is_its_own_family_not_ltxvs(comfy_root):
    """LTX-2's blocks take and return a (video, audio) pair and its loop perturbs blocks by index
    (``stg_self_attn_blocks``): ComfyUI's own ``LTXAVModel``, built on the meta device, resolves to the LTX-2
    entry (tests/families/test_families_ltx2_comfyui.py), never to LTXV's, whose loop hands blocks one tensor."""
    import subprocess

    from devkit.comfy_harness import comfyui_python, repo_env

    done = subprocess.run([comfyui_python(comfy_root), "-c", _LTX2_SCRIPT], cwd=comfy_root, env=repo_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "LTX-2 (ComfyUI native)", done.stdout
