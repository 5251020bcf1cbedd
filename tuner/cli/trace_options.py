"""The request-source options `predict`, `tune`, `plan` and `bench` share: a trace, sessions."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["SessionsName", "TraceFile"]

TraceFile = Annotated[
    str | None,
    typer.Option(
        "--trace",
        help="Replay a request trace (Mooncake JSONL, or CSV/JSONL of timestamp, input, output, "
        "optional session and turn) at its recorded times scaled to the rate",
    ),
]
SessionsName = Annotated[
    str | None,
    typer.Option(
        "--sessions",
        help="Synthetic multi-turn sessions replayed as a trace: chat, coding-agent, rag, or a "
        "sessions YAML",
    ),
]
