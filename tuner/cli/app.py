"""The Typer application object and the guard that turns TunerError into one line + exit code."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console

from tuner.errors import TunerError

__all__ = ["app", "console", "err_console", "guarded"]

app = typer.Typer(
    name="tuner",
    help="Find the LLM serving configuration that meets your latency SLA at the lowest cost.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True, soft_wrap=True)

P = ParamSpec("P")
R = TypeVar("R")


def guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command so a TunerError prints one line on stderr and exits with its code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except TunerError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False)
            sys.stderr.flush()
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err_console.print("interrupted; completed work is kept in the run folder")
            raise typer.Exit(130) from None

    return wrapper
