"""The Typer application, its one-line error handling and the guard for TunerError."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import typer

# Typer vendors click; its exception classes are only reachable here.
from typer._click import exceptions as click_errors
from typer.core import TyperGroup

from tuner.cli.output import console, err_console, print_error
from tuner.cli.signals import interrupt_on_stop_signals
from tuner.errors import BackendError, TunerError, environment_error
from tuner.extras import missing_extra

__all__ = [
    "EXIT_CODES_HELP",
    "INTERNAL_ERROR_EXIT",
    "app",
    "console",
    "err_console",
    "finite_positive",
    "guarded",
]

# Exit code of an unexpected exception (a bug): distinct from the documented 2/3/4/130.
INTERNAL_ERROR_EXIT = 1


class OneLineGroup(TyperGroup):
    """Click usage errors as one `error:` line (not a Rich box); Ctrl-C exits 130 quietly."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the CLI; every failure ends as one stderr line and an exit code."""
        try:
            with interrupt_on_stop_signals():  # SIGTERM/SIGHUP take Ctrl-C's path
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except click_errors.NoArgsIsHelpError as exc:
            typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
            code = 0
        except click_errors.ClickException as exc:
            print_error(exc.format_message())
            code = exc.exit_code
        except (typer.Abort, KeyboardInterrupt):
            print_error("interrupted")
            code = 130
        except Exception as exc:  # a bug: still one line for the user; TUNER_DEBUG=1 shows it
            if os.environ.get("TUNER_DEBUG"):
                raise
            code = _unexpected(exc)
        if standalone_mode:
            raise SystemExit(code)
        return code


def _unexpected(exc: Exception) -> int:
    """Print one line for an exception no command handled; the exit code it deserves."""
    # An optional piece that is not installed is the user's to fix, not a bug.
    missing = missing_extra(exc) if isinstance(exc, ImportError) else None
    if missing:
        print_error(missing)
        return BackendError.exit_code
    if isinstance(exc, ModuleNotFoundError) and not (exc.name or "").startswith("tuner"):
        # A module tuner does not ship (a database driver a --storage URL needs, say): the
        # environment's to fix, not a bug.
        print_error(f"the Python module {exc.name!r} is not installed: pip install it")
        return BackendError.exit_code
    found = environment_error(exc)
    if found is not None:  # a full disk, a read-only folder, a file where a folder belongs
        line, code = found
        print_error(line)
        return code
    print_error(
        f"internal error ({type(exc).__name__}: {exc}); please report it "
        "(TUNER_DEBUG=1 shows the traceback)"
    )
    return INTERNAL_ERROR_EXIT


# The exit codes as `tuner --help` states them (docs/README.md has the long form).
EXIT_CODES_HELP = (
    "Exit codes: 0 success; 2 bad input (a name, file, path or value, bounds included); "
    "3 nothing meets the SLA; 4 a backend or the storage could not run (server, disk, "
    "database); 130 interrupted; 1 only for a bug."
)

app = typer.Typer(
    name="tuner",
    cls=OneLineGroup,
    help="Find the LLM serving configuration that meets your latency SLA at the lowest cost.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

P = ParamSpec("P")
R = TypeVar("R")


def guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command so a TunerError prints one line on stderr and exits with its code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except TunerError as exc:
            # Only a failed search carries detail lines (its closest variants); user text
            # inside any other message is flattened onto the one line.
            head, *details = str(exc).split("\n") if exc.exit_code == 3 else [str(exc)]
            print_error(head, details)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            print_error("interrupted")
            raise typer.Exit(130) from None

    return wrapper


def finite_positive(value: float | None) -> float | None:
    """Typer callback: a flag that must be a finite number > 0 (None = not given)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"must be a finite number > 0 (got {value:g})")
    return value
