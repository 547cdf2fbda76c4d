"""Maintenance scripts, run with ``python -m tools.<name>`` from the repository root. Never shipped."""
