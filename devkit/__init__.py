"""What the tests, the benchmarks and the tools share: the ComfyUI harness, the generated models, the
prompts and the proxy builders.

A package of the repository root (``from devkit.comfy_harness import ComfyServer``), never shipped
(``.comfyignore``) and never imported by ComfyUI, which loads only the root ``__init__.py``. Its
modules run with ``python -m devkit.<module>`` from the repository root. Empty on purpose:
``dev.py`` and the GPU check's setup import ``devkit.comfy_harness`` with the standard library alone.
"""
