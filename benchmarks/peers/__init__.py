"""The peer benchmark's parts; its entry is the script beside this folder, ``benchmarks/peers.py``.

That script and this package share the name ``peers``, which Python allows: run by path
(``python benchmarks/peers.py``) the script is ``__main__``, and ``import peers`` (with
``benchmarks/`` on ``sys.path``, as the script, the tests and the other benchmarks put it) finds
this package, as a folder with an ``__init__.py`` comes before a module of the same name. The
parts import each other relatively and the other benchmarks (``speedup``, ``projection``,
``spread``, ``krea2_costs``) from ``benchmarks/``.
"""
