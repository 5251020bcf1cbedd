"""What every self-contained report page shares: the Plotly divs and calls, and the handler that
shows JavaScript errors on the page (so a broken report is visible, and testable, offline)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ONERROR_JS", "plot_divs", "plot_script"]

ONERROR_JS = (
    "window.addEventListener('error', function(e){var d=document.getElementById('js-errors');"
    "d.textContent += 'JavaScript error: ' + e.message + '\\n';});"
)


def plot_divs(figs: dict[str, dict[str, Any]]) -> str:
    """One `<div class="plot">` per figure id."""
    return "".join(f'<div class="plot" id="{fid}"></div>' for fid in figs)


def plot_script(figs: dict[str, dict[str, Any]]) -> str:
    """The `Plotly.newPlot` call of every figure (plain dicts: data and layout)."""
    return "\n".join(
        f"Plotly.newPlot({json.dumps(fid)}, {json.dumps(f['data'])}, {json.dumps(f['layout'])},"
        " {responsive: true});"
        for fid, f in figs.items()
    )
