"""The shell every self-contained report page shares: head, embedded plotly.js, the handler that
shows JavaScript errors on the page (so a broken report is visible, and testable, offline), the
Plotly divs and calls, and the marker the Chromium tests read."""

from __future__ import annotations

import html
import json
from typing import Any

from plotly.offline import get_plotlyjs

__all__ = ["ONERROR_JS", "page_html", "plot_divs", "plot_script"]

ONERROR_JS = (
    "window.addEventListener('error', function(e){var d=document.getElementById('js-errors');"
    "d.textContent += 'JavaScript error: ' + e.message + '\\n';});"
)

# Run after every Plotly.newPlot: the number of drawn plots, for tests that open the page.
_RENDERED_JS = """document.body.setAttribute('data-plots-rendered',
  document.querySelectorAll('.plot .main-svg').length);"""


def plot_divs(figs: dict[str, dict[str, Any]]) -> str:
    """One `<div class="plot">` per figure id."""
    return "".join(f'<div class="plot" id="{fid}"></div>' for fid in figs)


def _js(value: Any) -> str:
    """`value` as a JavaScript literal that cannot end the inline script ("</" becomes "<\\/")."""
    return json.dumps(value).replace("</", "<\\/")


def plot_script(figs: dict[str, dict[str, Any]]) -> str:
    """The `Plotly.newPlot` call of every figure (plain dicts: data and layout)."""
    return "\n".join(
        f"Plotly.newPlot({_js(fid)}, {_js(f['data'])}, {_js(f['layout'])}, {{responsive: true}});"
        for fid, f in figs.items()
    )


def page_html(
    title: str, body: str, figs: dict[str, dict[str, Any]], css: str = "", after: str = ""
) -> str:
    """A self-contained page: the title as heading, `body` (HTML), the figures, then `after`."""
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{css}</style><script>{ONERROR_JS}</script>
<script>{get_plotlyjs()}</script></head>
<body><h1>{html.escape(title)}</h1>
<pre id="js-errors"></pre>
{body}
{plot_divs(figs)}
{after}
<script>{plot_script(figs)}
{_RENDERED_JS}
</script>
</body></html>
"""
