"""plan.html opens in headless Chromium offline, without JavaScript errors, with both charts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_report_chromium import CHROMIUM, dump_dom
from tuner.cli import app

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")


def test_plan_html_renders_both_charts_without_js_errors(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["--model", "llama-3.2-1b", "--rate", "20", "--gpus", "l40s,h100-sxm", "--isl", "256"]
    args += ["--osl", "64", "--num-requests", "40", "--run-dir", str(run)]
    result = CliRunner().invoke(app, ["plan", *args])
    assert result.exit_code == 0, result.output
    proc = dump_dom(run / "plan.html", tmp_path / "profile")
    dom, log = proc.stdout, proc.stderr
    assert proc.returncode == 0, log[-2000:]
    assert "Uncaught" not in log
    assert re.search(r'<pre id="js-errors"></pre>', dom), "the page caught a JavaScript error"
    rendered = re.search(r'data-plots-rendered="(\d+)"', dom)
    assert rendered and int(rendered.group(1)) >= 2
    for plot in ('id="cost"', 'id="gpus"'):
        assert "main-svg" in dom[dom.index(plot) :][:20000], plot
    assert "GPUs needed vs target load" in dom and "l40s" in dom
    assert 'src="http' not in dom
