"""The registry publish workflow (.github/workflows/publish.yml), which runs on GitHub only: it parses as YAML,
runs on a push to main that changes pyproject.toml (a version bump publishes), and hands Comfy-Org's publish action
the REGISTRY_ACCESS_TOKEN secret."""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "publish.yml"


def test_publish_workflow_runs_the_registry_action_on_a_pyproject_change():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))   # YAML 1.1 reads the key `on` as true
    push = triggers["push"]
    assert push["paths"] == ["pyproject.toml"], push
    assert "main" in push["branches"], push
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    assert any(step.get("uses", "").startswith("actions/checkout@") for step in steps), steps
    (publish,) = [step for step in steps if step.get("uses", "").startswith("Comfy-Org/publish-node-action@")]
    assert publish["with"]["personal_access_token"] == "${{ secrets.REGISTRY_ACCESS_TOKEN }}", publish
