"""plan.yaml's schema: the whole plan result, versioned."""

from __future__ import annotations

from pathlib import Path

from tuner.plan.models import PlanResult
from tuner.results.io import SCHEMA_VERSION, read_result

__all__ = ["PlanFile", "load_plan"]


class PlanFile(PlanResult):
    """plan.yaml: what was asked and, per GPU kind, what it takes and costs."""

    schema_version: int = SCHEMA_VERSION


def load_plan(path: Path) -> PlanFile:
    """Read and validate a plan.yaml (any schema version this tuner knows)."""
    return read_result(path, PlanFile, "plan.yaml")
