"""The peer benchmark: ``python -m benchmarks.peers`` runs it (``__main__.py``); its parts import each
other relatively and the other benchmarks (``speedup``, ``projection``, ``spread``, ``krea2_costs``)
as ``benchmarks.<name>``.
"""
