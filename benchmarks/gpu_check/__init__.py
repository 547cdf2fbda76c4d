"""The GPU check's parts; its entries are ``python3 dev.py gpu-check`` (``setup.main``: prepare,
install, smoke) and the script beside this folder, ``benchmarks/gpu_check.py``, that the install runs.

That script and this package share the name ``gpu_check``, which Python allows: run by path the
script is ``__main__``, and ``import gpu_check`` (with ``benchmarks/`` on ``sys.path``, as the
script, ``dev.py`` and the tests put it) finds this package, as a folder with an ``__init__.py``
comes before a module of the same name. Empty on purpose: ``setup`` runs with the standard
library alone, before anything is installed, and importing it imports this first.
"""
