"""confirm.yaml's schema: a screened tune's inputs, options and every measured variant."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tuner.result_io import keep_layout, read_result
from tuner.run_spec import RunSpec
from tuner.screen.options import ScreenOptions
from tuner.screen.variant import ConfirmedVariant

__all__ = ["CONFIRM_HEADER", "CONFIRM_SCHEMA_VERSION", "ConfirmFile", "load_confirm"]

# The layout confirm.yaml is written in; version 1 only added the key to version 0's layout.
CONFIRM_SCHEMA_VERSION = 1
CONFIRM_HEADER = "# tuner tune --screen: the screened tune's measurements\n"


class ConfirmFile(BaseModel):
    """confirm.yaml: the run's options, where the baseline came from, and each variant in full."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(default=CONFIRM_SCHEMA_VERSION, description="Layout of the file")
    options: ScreenOptions
    baseline_source: str = Field(description="Where the engine-default baseline came from")
    gain_over_defaults: float | None = Field(description="Measured capacity gain over baseline")
    passed_over: list[str] = Field(description="Screen variants not measured, and why")
    variants: list[ConfirmedVariant]
    spec: RunSpec


def load_confirm(path: Path) -> ConfirmFile:
    """Read and validate a confirm.yaml (any schema version this tuner knows)."""
    return read_result(path, ConfirmFile, "confirm.yaml", (keep_layout,))
