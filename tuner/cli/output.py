"""Printing that survives a pipe: escaped user text, uncut tables, --json, one-line errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.errors import one_line, printable

__all__ = [
    "cell",
    "console",
    "err_console",
    "print_error",
    "print_json",
    "print_note",
    "print_rows",
    "print_table",
    "say",
]

console = Console(highlight=False)
err_console = Console(stderr=True, soft_wrap=True, highlight=False)

# Off a terminal Rich wraps to 80 columns and cuts table cells; a pipe gets the natural width.
_PIPE_WIDTH = 100_000


# Line breaks and tabs of a multi-line block stay; any other control character in user or
# server text (an ESC from a server's model id or error body) is shown escaped, never obeyed.
_KEEP = "\n\t"


def say(text: str, *, style: str | None = None) -> None:
    """Print plain (user-derived) text on stdout; brackets stay literal, controls are escaped,
    nothing is cut."""
    console.print(escape(printable(text, _KEEP)), style=style, soft_wrap=not console.is_terminal)


# A detail listing under an error line (the closest variants of a failed search) stays short.
MAX_DETAIL_LINES = 12


def print_error(message: str, details: Sequence[str] = ()) -> None:
    """The one stderr line of a failed command, `error: <message>`, escaped and bounded;
    optional indented detail lines after it (never starting with `error:`)."""
    err_console.print(f"[bold red]error:[/] {escape(one_line(message))}")
    for line in details[:MAX_DETAIL_LINES]:
        err_console.print("  " + escape(one_line(line)))
    sys.stderr.flush()


def print_note(text: str) -> None:
    """A side remark on stderr (stdout stays clean for --json and pipes)."""
    err_console.print(f"note: {escape(one_line(text))}")


def print_table(table: Table) -> None:
    """A Rich table; off a terminal at its natural width so names and numbers are never cut."""
    if console.is_terminal:
        console.print(table)
        return
    # Console.print(width=) can only narrow, so a pipe gets a console of its own.
    Console(file=sys.stdout, width=_PIPE_WIDTH, highlight=False).print(table, crop=False)


def print_rows(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1
) -> None:
    """A table of plain-text cells (escaped); the first `left` columns align left."""
    t = Table(title=cell(title))
    for i, col in enumerate(columns):
        t.add_column(cell(col), justify="left" if i < left else "right", overflow="fold")
    for row in rows:
        t.add_row(*(cell(str(c)) for c in row))
    print_table(t)


def cell(text: str) -> str:
    """Plain text as Rich markup for a table cell or title: brackets literal, controls escaped."""
    return escape(printable(text))


def print_json(data: Any) -> None:
    """One JSON document on stdout (no Rich: nothing wrapped, highlighted or escaped)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
