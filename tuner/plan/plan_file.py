"""plan.yaml's schema: the whole plan result, versioned."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from tuner.plan.models import PlanResult
from tuner.result_io import keep_layout, read_result

__all__ = ["PLAN_SCHEMA_VERSION", "PlanFile", "load_plan"]

# The layout plan.yaml is written in; version 1 only added the key to version 0's layout.
PLAN_SCHEMA_VERSION = 1


class PlanFile(PlanResult):
    """plan.yaml: what was asked and, per GPU kind, what it takes and costs."""

    schema_version: int = Field(default=PLAN_SCHEMA_VERSION, description="Layout of the file")


def load_plan(path: Path) -> PlanFile:
    """Read and validate a plan.yaml (any schema version this tuner knows)."""
    return read_result(path, PlanFile, "plan.yaml", (keep_layout,))
