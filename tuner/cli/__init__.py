"""Command-line interface: thin Typer commands over the library."""

from __future__ import annotations

from tuner.cli.signals import quiet_interrupt

# Importing the commands takes about a second (optuna, pydantic models, plotting): Ctrl-C in it
# is one line and exit 130, as it is once a command runs.
with quiet_interrupt():
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
    with quiet_interrupt():  # Typer's own setup, before the command's error handling starts
        app()
