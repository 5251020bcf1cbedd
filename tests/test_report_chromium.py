"""The HTML report opens in headless Chromium offline, without JavaScript errors, with plots."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def dump_dom(page: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    """Open `page` in headless Chromium offline; stdout is the DOM after the scripts ran."""
    assert CHROMIUM is not None
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0"]
    command += ["--virtual-time-budget=10000", "--dump-dom", page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    args = ["--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--trials", "30"]
    result = CliRunner().invoke(app, ["tune", *args, "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    return run / "report.html"


def test_report_renders_plots_without_js_errors(report: Path, tmp_path: Path) -> None:
    proc = dump_dom(report, tmp_path / "profile")
    dom, log = proc.stdout, proc.stderr
    assert proc.returncode == 0, log[-2000:]
    console_errors = [ln for ln in log.splitlines() if "CONSOLE" in ln and "rror" in ln]
    assert not console_errors, console_errors
    assert "Uncaught" not in log
    assert re.search(r'<pre id="js-errors"></pre>', dom), "the page caught a JavaScript error"
    rendered = re.search(r'data-plots-rendered="(\d+)"', dom)
    assert rendered and int(rendered.group(1)) >= 4
    # The Pareto plot drew its SVG, with the recommended star and the SLA bound label.
    pareto = dom[dom.index('id="pareto-tpot"') :]
    assert "main-svg" in pareto[:20000]
    assert "recommended" in dom and "SLA TPOT 50 ms" in dom
    # Capacity mode (the default tune): the frontier chart and the latency-vs-load curves drew.
    frontier = dom[dom.index('id="frontier"') :]
    assert "main-svg" in frontier[:20000]
    assert "main-svg" in dom[dom.index('id="load-tpot"') :][:20000]
    # Issue 19: the answer leads: the card with the binding limit, then the frontier, the knob
    # sensitivity and the SLA-cost curve, before the other figures and the long tables.
    order = [dom.index(s) for s in ("Binding limit:", 'id="frontier"', 'id="sensitivity"')]
    order += [dom.index(s) for s in ('id="sla-cost"', 'id="pareto-tpot"', "<h2>Pareto set</h2>")]
    assert order == sorted(order)
    for fid in ("sensitivity", "sla-cost"):
        assert "main-svg" in dom[dom.index(f'id="{fid}"') :][:20000], fid
    assert "1 closed-loop users" not in dom and "open-loop Poisson arrivals" in dom
    # Every front row names its binding limit, with the simulator's evidence.
    table = dom[dom.index('<table class="pareto">') :]
    assert "<th>binding limit</th>" in table and "limited by " in table
    assert 'src="http' not in dom  # nothing fetched from the network: plotly.js is inline
