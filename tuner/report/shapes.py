"""Plotly layout shapes the report figures share: the dashed lines marking a bound or a target."""

from __future__ import annotations

from typing import Any

__all__ = ["SLA_LINE", "hline", "vline"]

# How an SLA bound is drawn on every report figure.
SLA_LINE = {"color": "crimson", "dash": "dash"}


def hline(y: float, line: dict[str, Any]) -> dict[str, Any]:
    """A horizontal line at data height `y` across the whole plot width."""
    return {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": y, "y1": y, "line": line}


def vline(x: float, line: dict[str, Any]) -> dict[str, Any]:
    """A vertical line at data position `x` across the whole plot height."""
    return {"type": "line", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1, "line": line}
