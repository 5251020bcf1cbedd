"""Issue 33, item 7 (budgets): a time budget holds inside a capacity probe, and bench's pre-flight
obeys --timeout.

Before, the budget was checked only between probes (a 120 s confirm budget ran past 500 s), and
`tuner bench --timeout 1` still waited 30 s on a server that accepts and never answers.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from tests._fake_openai import FakeServerConfig, running_fake_server
from tuner import catalog
from tuner.backends.vllm import VLLMBackend
from tuner.bench.loadgen import Endpoint, LoadOptions, run_workload
from tuner.bench.stats import BUDGET_CUT
from tuner.cli import app
from tuner.perf.load import ProbeBudget
from tuner.specs import SLA, Context, EngineConfig, Workload

FAKE_SERVER = Path(__file__).with_name("_fake_openai.py")


def test_the_load_stops_sending_and_waiting_at_the_deadline() -> None:
    # 8 requests of ~1.2 s each, one user: ~10 s of load; the deadline is 1.5 s away.
    workload = Workload(input_tokens=8, output_tokens=5, concurrency=1, num_requests=8)
    with running_fake_server(FakeServerConfig(ttft_s=0.2, itl_s=0.25)) as srv:
        t0 = time.monotonic()
        options = LoadOptions(probe_requests=0, deadline=t0 + 1.5)
        m = run_workload(Endpoint(srv.url), workload, options=options)
        took = time.monotonic() - t0
    assert took < 4.0, took
    assert m.extra[BUDGET_CUT] is True and m.extra["budget_cut_requests"] > 0  # type: ignore[operator]
    assert m.failed_requests == 0  # a request the budget cut is not the server's failure


def test_a_budget_spent_before_the_load_is_an_infeasible_cut_probe() -> None:
    workload = Workload(input_tokens=8, output_tokens=5, concurrency=1, num_requests=2)
    with running_fake_server(FakeServerConfig(ttft_s=2.0)) as srv:
        options = LoadOptions(probe_requests=1, deadline=time.monotonic() + 0.5)
        m = run_workload(Endpoint(srv.url), workload, options=options)
    assert not m.feasible and m.extra[BUDGET_CUT] is True and "time budget" in str(m.reason)


def test_a_capacity_search_ends_inside_a_probe_when_its_budget_runs_out(tmp_path: Path) -> None:
    fake = tmp_path / "fake-python"
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVER}" "$@"\n')
    fake.chmod(0o755)
    backend = VLLMBackend(
        model_path=str(tmp_path / "model"),
        run_dir=tmp_path / "runs",
        python=str(fake),
        extra_args=["--fake-itl-s", "0.3"],  # ~2.5 s a request: a probe takes many seconds
        startup_timeout_s=30.0,
        stop_grace_s=2.0,
        metrics_poll_s=0.05,
        probe_budget=ProbeBudget(max_probes=8, max_seconds=3.0),
    )
    ctx = Context(
        model=catalog.load_model("smollm2-135m"),
        gpu=catalog.load_gpu("h200-sxm"),
        sla=SLA(ttft_ms=5000, tpot_ms=1000),
        workload=Workload(input_tokens=16, output_tokens=8, num_requests=20),
        num_gpus=1,
    )
    t0 = time.monotonic()
    cap, _ = backend.capacity_search(EngineConfig(max_num_seqs=4), ctx)
    took = time.monotonic() - t0
    # Startup and stop take a few seconds; the 20-request probe alone would take over 40.
    assert took < 3.0 + 15.0, took
    assert cap.budget_exhausted and cap.points == []


def test_bench_preflight_gives_up_after_timeout_on_a_silent_server() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        result = CliRunner().invoke(app, ["bench", "--url", url, "--timeout", "1"])
        took = time.monotonic() - t0
    assert result.exit_code == 4, result.output
    assert took < 10.0, took  # before: the 30 s pre-flight timeout, whatever --timeout said
