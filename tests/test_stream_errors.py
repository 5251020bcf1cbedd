"""Issue 33, item 4: a stream that ends in an error event, a lying `usage` and an endless SSE line.

A request counts as served only when its stream ends in `data: [DONE]` with no error event (vLLM
aborts a generation with `data: {"error": ...}`), and its token counts come from what was
streamed: the fake server (tests/_fake_openai.py) plays each misbehaviour.
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from tests._fake_openai import FakeServerConfig, running_fake_server
from tuner.bench.loadgen import MAX_SSE_LINE_BYTES, Endpoint, LoadOptions, run_workload
from tuner.cli import app
from tuner.specs import Workload

runner = CliRunner()


def _fast(**misbehaviour: Any) -> FakeServerConfig:
    """A fake server that answers at once, with one misbehaviour."""
    return FakeServerConfig(ttft_s=0.001, itl_s=0.001, **misbehaviour)


def _workload(**kw: object) -> Workload:
    base: dict[str, object] = {
        "input_tokens": 8,
        "output_tokens": 6,
        "concurrency": 2,
        "num_requests": 4,
    }
    base.update(kw)
    return Workload(**base)  # type: ignore[arg-type]


def _run(cfg: FakeServerConfig, **kw: object):  # noqa: ANN202 (Metrics)
    with running_fake_server(cfg) as srv:
        return run_workload(
            Endpoint(srv.url), _workload(**kw), options=LoadOptions(probe_requests=0)
        )


def test_a_stream_ending_in_an_error_event_is_a_failed_request_not_a_zero_latency_one() -> None:
    # Before: tokens then `data: {"error": ...}` counted as a success with E2E 0.
    m = _run(_fast(error_after=3))
    assert m.failed_requests == m.num_requests == 4
    assert not m.feasible
    assert "server error: generation aborted" in str(m.extra["failure_reasons"])
    assert m.e2e_ms.p50 == 0.0 and m.output_tokens_per_s == 0.0  # nothing was served


def test_bench_exits_4_when_every_stream_is_aborted() -> None:
    with running_fake_server(_fast(error_after=2)) as srv:
        result = runner.invoke(app, ["bench", "--url", srv.url, "--num-requests", "2"])
    assert result.exit_code == 4, result.output
    assert "generation aborted" in result.stderr


def test_an_error_event_before_any_token_is_a_failed_request() -> None:
    m = _run(_fast(error_after=0))
    assert m.failed_requests == 4 and "server error" in str(m.reason)


def test_a_usage_that_claims_more_tokens_than_asked_is_not_believed() -> None:
    # Before: usage.completion_tokens = 1e32 gave 1e32 tok/s.
    lie = {"prompt_tokens": 10**30, "completion_tokens": 10**32, "total_tokens": 10**32}
    m = _run(_fast(usage_override=lie))
    assert m.failed_requests == 0
    duration = float(m.extra["duration_s"])  # type: ignore[arg-type]
    assert m.output_tokens_per_s == pytest.approx(4 * 6 / duration)  # the streamed tokens
    assert m.total_tokens_per_s == pytest.approx(4 * (8 + 6) / duration)  # planned prompts
    assert m.extra["output_tokens_from"] == "chunks"


def test_a_usage_below_the_streamed_chunks_is_not_believed() -> None:
    lie = {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}
    m = _run(_fast(usage_override=lie))
    assert m.extra["output_length_mismatches"] == 0 and m.extra["output_tokens_from"] == "chunks"


def test_a_plausible_usage_counts_the_tokens_of_multi_token_chunks() -> None:
    # Two tokens per chunk (speculative decoding): 3 chunks, usage says 6 = what was asked.
    m = _run(_fast(tokens_per_chunk=2))
    assert m.failed_requests == 0 and m.extra["output_tokens_from"] == "usage"
    assert m.extra["output_length_mismatches"] == 0


def test_an_sse_line_over_the_cap_fails_the_request_without_reading_it_all() -> None:
    m = _run(_fast(long_line_bytes=MAX_SSE_LINE_BYTES + 10), num_requests=1)
    assert m.failed_requests == m.num_requests == 1
    assert f"longer than {MAX_SSE_LINE_BYTES} bytes" in str(m.extra["failure_reasons"])
