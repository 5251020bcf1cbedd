"""The one page shell (tuner.report.page): what every report page is built from."""

from __future__ import annotations

from pathlib import Path

from tuner.plan.chart import ChartData, LoadCurve, render_html
from tuner.report.page import ONERROR_JS, page_html

PACKAGE = Path(__file__).resolve().parent.parent / "tuner"
FIG = {"data": [{"type": "scatter", "x": [1], "y": [2]}], "layout": {}}


def test_the_page_has_the_error_handler_before_plotly_and_one_div_and_call_per_figure() -> None:
    page = page_html("A & B", "<p>body</p>", {"a": FIG}, css="h1{color:red}")
    assert page.count("<title>A &amp; B</title>") == 1 and "<h1>A &amp; B</h1>" in page
    assert page.index(ONERROR_JS) < page.index("Plotly.newPlot") < page.index("</body>")
    assert page.index('<pre id="js-errors"></pre>') < page.index("<p>body</p>")
    assert page.index("<p>body</p>") < page.index('<div class="plot" id="a"></div>')
    assert page.count('Plotly.newPlot("a", ') == 1
    assert "<style>h1{color:red}</style>" in page and "data-plots-rendered" in page


def test_figure_text_cannot_end_the_inline_script() -> None:
    fig = {"data": [], "layout": {"title": {"text": "<b>x</b></script><script>alert(1)"}}}
    page = page_html("t", "", {"a": fig})
    script = page[page.index('Plotly.newPlot("a"') :]
    assert "</script><script>alert" not in script and "<\\/script><script>alert(1)" in script
    assert script.index("</script>") > script.index("data-plots-rendered")


def test_the_plan_page_is_built_from_the_shared_shell() -> None:
    data = ChartData(
        title="Plan <x>",
        percentile=90,
        tpot_bound_ms=50.0,
        target_rps=2.0,
        cost_points=[],
        load_curves=[LoadCurve(gpu="l40s", loads_rps=[0.0, 1.0], gpus=[0, 1])],
    )
    page = render_html(data, ["3 x l40s < 4 x h100"])
    assert page.startswith("<!DOCTYPE html>") and ONERROR_JS in page
    assert "<h1>Plan &lt;x&gt;</h1>" in page and "<li>3 x l40s &lt; 4 x h100</li>" in page
    assert '<div class="plot" id="cost"></div><div class="plot" id="gpus"></div>' in page


def test_no_other_module_writes_a_page_shell() -> None:
    shells = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "<!DOCTYPE" in p.read_text() or "get_plotlyjs" in p.read_text()
    )
    assert shells == ["report/page.py"]
