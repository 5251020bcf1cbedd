"""Command-line interface: thin Typer commands over the library."""

from __future__ import annotations

from tuner.cli import (
    acceptance_cmd,  # noqa: F401
    bench_cmd,  # noqa: F401
    calibrate_cmd,  # noqa: F401
    catalog_cmds,  # noqa: F401  (registers commands)
    plan_cmd,  # noqa: F401
    predict_cmd,  # noqa: F401
    tune_cmd,  # noqa: F401
    worker_cmd,  # noqa: F401
)
from tuner.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point."""
    app()
