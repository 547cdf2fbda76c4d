"""The benchmarks: each module runs with ``python -m benchmarks.<name>`` from the repository root
(``python -m benchmarks.speedup``, ``python -m benchmarks.peers``); the tests import their parts
(``from benchmarks.peers import cases``). Never shipped (``.comfyignore``). Empty on purpose:
``dev.py gpu-check`` imports ``benchmarks.gpu_check.setup`` with the standard library alone.
"""
