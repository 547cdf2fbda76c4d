"""The GPU check: ``python3 dev.py gpu-check`` (``setup.main``: prepare, install, smoke) installs what it
needs, then runs ``python -m benchmarks.gpu_check`` (``__main__.py``) in the installed environment.
Empty on purpose: ``setup`` runs with the standard library alone, before anything is installed, and
importing it imports this first.
"""
