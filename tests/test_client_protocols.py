"""Issue 19 item 6: numbers under the protocol of the benchmark client a user checks us with."""

from __future__ import annotations

import pytest
from _fake_openai import FakeServerConfig, running_fake_server
from typer.testing import CliRunner

from tuner.bench.protocols import PROTOCOL_NAMES, protocol_line
from tuner.catalog import load_gpu, load_model, load_sla
from tuner.cli import app
from tuner.perf.predict import predict_metrics
from tuner.specs import Context, EngineConfig, Workload

runner = CliRunner()


def _ctx(wl: Workload) -> Context:
    return Context(
        model=load_model("llama-3.1-8b"), gpu=load_gpu("h200-sxm"), sla=load_sla("chat"),
        workload=wl,
    )  # fmt: skip


@pytest.mark.unit
@pytest.mark.parametrize("name", [n for n in PROTOCOL_NAMES if n != "steady"])
def test_a_client_protocol_starts_every_user_at_once_and_counts_every_request(name: str) -> None:
    wl = Workload(concurrency=16, protocol=name)  # type: ignore[arg-type]
    assert wl.warmup_count == 0 and wl.start_ramp_s == 0.0
    assert Workload(concurrency=16, protocol=name, warmup_requests=3).warmup_count == 3  # type: ignore[arg-type]
    steady = Workload(concurrency=16)
    assert steady.warmup_count == 16 and steady.start_ramp_s is None
    assert "protocol" not in steady.model_dump()  # older run files read back unchanged
    assert f"protocol {name}: users start at once, every request counted" in protocol_line(wl)


@pytest.mark.unit
def test_the_simulator_under_vllm_bench_is_the_burst_replay_and_reports_a_higher_ttft() -> None:
    base = Workload(concurrency=32, num_requests=128)
    config = EngineConfig()
    burst = predict_metrics(config, _ctx(base.model_copy(update={"protocol": "vllm-bench"})))
    explicit = predict_metrics(
        config, _ctx(base.model_copy(update={"warmup_requests": 0, "ramp_s": 0.0}))
    )
    steady = predict_metrics(config, _ctx(base))
    assert burst.ttft_ms == explicit.ttft_ms and burst.warmup_requests == 0
    # Every user's prompt arrives in the same instant: the first wave queues behind the others.
    assert burst.ttft_ms.mean > 1.5 * steady.ttft_ms.mean


@pytest.mark.unit
def test_predict_says_which_protocol_its_numbers_follow_and_refuses_an_unknown_one() -> None:
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--concurrency", "8"]
    ok = runner.invoke(app, [*args, "--protocol", "aiperf"])
    assert ok.exit_code == 0, ok.output
    assert "protocol aiperf: users start at once, every request counted" in ok.output
    assert "0 warm-up" in ok.output
    bad = runner.invoke(app, [*args, "--protocol", "vllm"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert bad.output.count("\n") == 1 and "--protocol" in bad.output
    assert "'vllm-bench'" in bad.output


def test_bench_under_vllm_bench_counts_every_request_and_says_so() -> None:
    with running_fake_server(FakeServerConfig(ttft_s=0.01, itl_s=0.005)) as server:
        result = runner.invoke(app, ["bench", "--url", server.url, "--isl", "8", "--osl", "3",
                                     "--num-requests", "4", "--concurrency", "2",
                                     "--protocol", "vllm-bench"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "4/4 measured ok" in result.output and "after 0 warm-up" in result.output
    assert "protocol vllm-bench" in result.output


@pytest.mark.unit
def test_tune_names_a_bad_workload_flag_by_its_flag() -> None:
    args = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--trials", "2"]
    result = runner.invoke(app, [*args, "--workload-kind", "poetry"])
    assert result.exit_code == 2 and result.output.startswith("error: --workload-kind: ")
    assert "Traceback" not in result.output
