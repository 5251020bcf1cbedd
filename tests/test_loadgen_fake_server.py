"""loadgen against a fake OpenAI-compatible streaming server with known token timings."""

from __future__ import annotations

import pytest
from _fake_openai import FakeServerConfig, running_fake_server

from tuner.bench.arrivals import plan_workload
from tuner.bench.loadgen import Endpoint, LoadOptions, check_endpoint, plan_requests, run_workload
from tuner.errors import BackendError
from tuner.specs import Metrics, Workload

# Sleeps are lower bounds; scheduling on a busy 2-core machine adds a little on top.
SLACK_MS = 40.0


def _workload(**kw: object) -> Workload:
    base: dict[str, object] = dict(input_tokens=16, output_tokens=6, num_requests=6, concurrency=3)
    base.update(kw)
    return Workload(**base)  # type: ignore[arg-type]


def test_known_timings_give_known_percentiles() -> None:
    cfg = FakeServerConfig(ttft_s=0.08, itl_s=0.02)
    with running_fake_server(cfg) as server:
        m = run_workload(Endpoint(server.url), _workload())
    assert m.feasible and m.failed_requests == 0 and m.num_requests == 6
    assert 80.0 <= m.ttft_ms.p50 <= 80.0 + SLACK_MS
    assert 20.0 <= m.itl_ms.p50 <= 20.0 + SLACK_MS / 2
    assert 20.0 <= m.tpot_ms.p50 <= 20.0 + SLACK_MS / 2
    # E2E = TTFT + 5 gaps
    assert 180.0 <= m.e2e_ms.p50 <= 180.0 + 2 * SLACK_MS
    assert m.extra["output_length_mismatches"] == 0 and m.extra["output_tokens_exact"]
    assert m.output_tokens_per_s == pytest.approx(36 / m.extra["duration_s"])  # type: ignore[operator]


def test_warmup_is_excluded_and_requests_carry_exact_lengths() -> None:
    with running_fake_server() as server:
        m = run_workload(
            Endpoint(server.url), _workload(num_requests=4), options=LoadOptions(probe_requests=2)
        )
    assert m.num_requests == 4 and m.warmup_requests == 3  # one warm-up request per user
    assert len(server.bodies) == 9  # 2 probes + 3 warm-up + 4 measured
    for body in server.bodies:
        assert body["ignore_eos"] is True and body["min_tokens"] == body["max_tokens"] == 6
        assert len(body["prompt"]) == 16  # token ids from the server's tokenizer
        assert body["stream_options"] == {"include_usage": True}


def test_ignore_eos_makes_outputs_full_length() -> None:
    with running_fake_server(FakeServerConfig(eos_after=2, ttft_s=0.01, itl_s=0.005)) as server:
        exact = run_workload(Endpoint(server.url), _workload())
        natural = run_workload(
            Endpoint(server.url), _workload(), options=LoadOptions(exact_output=False)
        )
    assert exact.extra["output_length_mismatches"] == 0
    assert natural.extra["output_length_mismatches"] == 6
    assert not natural.extra["output_tokens_exact"]

    def tokens(m: Metrics) -> float:
        return m.output_tokens_per_s * float(m.extra["duration_s"])  # type: ignore[arg-type]

    assert tokens(natural) == pytest.approx(12) and tokens(exact) == pytest.approx(36)


def test_a_server_rejecting_ignore_eos_is_reported_not_fatal() -> None:
    cfg = FakeServerConfig(reject_extra_params=True, eos_after=3, ttft_s=0.01, itl_s=0.005)
    with running_fake_server(cfg) as server:
        m = run_workload(Endpoint(server.url), _workload())
    assert m.feasible and m.failed_requests == 0
    assert m.extra["output_tokens_exact"] is False
    assert m.extra["output_length_mismatches"] == 6
    assert "ignore_eos" not in server.bodies[-1]


def test_failures_are_counted_with_their_reason() -> None:
    cfg = FakeServerConfig(fail_every=3, ttft_s=0.01, itl_s=0.005)
    with running_fake_server(cfg) as server:
        m = run_workload(Endpoint(server.url), _workload(num_requests=8, concurrency=1))
    # generations 3, 6, 9 fail; the first one is the warm-up
    assert m.num_requests == 8 and m.failed_requests == 3
    assert m.extra["failure_reasons"] == "HTTP 500: injected failure x3"


def test_timeout_is_a_failure() -> None:
    cfg = FakeServerConfig(ttft_s=0.5, itl_s=0.0)
    with running_fake_server(cfg) as server:
        m = run_workload(
            Endpoint(server.url),
            _workload(num_requests=2, concurrency=2),
            options=LoadOptions(timeout_s=0.2, probe_requests=0),
        )
    assert m.failed_requests == 2 and not m.feasible
    assert "timeout after 0.2 s" in (m.reason or "")


def test_speculative_chunks_count_tokens_from_usage() -> None:
    cfg = FakeServerConfig(tokens_per_chunk=3, ttft_s=0.01, itl_s=0.02)
    with running_fake_server(cfg) as server:
        m = run_workload(Endpoint(server.url), _workload(output_tokens=9))
    assert m.extra["output_length_mismatches"] == 0 and m.extra["output_tokens_from"] == "usage"
    # 9 tokens in 3 chunks: 2 gaps of 20 ms; TPOT = 40 ms / 8 tokens = 5 ms
    assert 20.0 <= m.itl_ms.p50 <= 20.0 + SLACK_MS / 2
    assert 5.0 <= m.tpot_ms.p50 <= 5.0 + SLACK_MS / 8


def test_without_usage_tokens_are_counted_from_chunks() -> None:
    cfg = FakeServerConfig(send_usage=False, ttft_s=0.01, itl_s=0.005)
    with running_fake_server(cfg) as server:
        m = run_workload(Endpoint(server.url), _workload())
    assert m.extra["output_tokens_from"] == "chunks"
    assert m.extra["output_length_mismatches"] == 0


def test_chat_api_and_text_prompts_without_tokenizer() -> None:
    cfg = FakeServerConfig(tokenize=False, ttft_s=0.01, itl_s=0.005)
    with running_fake_server(cfg) as server:
        m = run_workload(Endpoint(server.url, api="chat"), _workload())
    assert m.feasible and m.extra["input_tokens_exact"] is False
    msg = server.bodies[-1]["messages"][0]
    assert msg["role"] == "user" and len(msg["content"].split()) == 16


def test_poisson_open_loop_sends_every_request() -> None:
    with running_fake_server(FakeServerConfig(ttft_s=0.01, itl_s=0.005)) as server:
        m = run_workload(
            Endpoint(server.url),
            Workload(input_tokens=8, output_tokens=4, rate_rps=50.0, num_requests=10),
        )
    assert m.num_requests == 10 and m.failed_requests == 0
    assert m.extra["arrival"] == "poisson 50 rps"


def test_api_key_is_sent_and_a_wrong_key_is_one_clear_error() -> None:
    with running_fake_server(FakeServerConfig(api_key="sekret")) as server:
        m = run_workload(Endpoint(server.url, api_key="sekret"), _workload(num_requests=1))
        assert m.feasible
        assert server.headers[-1]["authorization"] == "Bearer sekret"
        with pytest.raises(BackendError, match="rejected the API key"):
            check_endpoint(Endpoint(server.url, api_key="wrong"))


def test_unknown_model_and_unreachable_url_raise_backend_error() -> None:
    with running_fake_server() as server:
        assert check_endpoint(Endpoint(server.url + "/v1/")) == "fake-model"
        with pytest.raises(BackendError, match="not served"):
            check_endpoint(Endpoint(server.url, model="other"))
        url = server.url
    with pytest.raises(BackendError, match="cannot reach"):
        check_endpoint(Endpoint(url))


def test_plan_requests_shares_the_prefix_and_keeps_lengths() -> None:
    pool = list(range(100, 400))
    w = Workload(input_tokens=40, output_tokens=8, length_spread=0.5, prefix_cache_hit=0.5,
                 num_requests=20, seed=3)  # fmt: skip
    reqs = plan_requests(w, plan_workload(w, None, count=20), pool)
    assert len({r.output_tokens for r in reqs}) > 1
    for r in reqs:
        assert isinstance(r.prompt, list) and len(r.prompt) == r.input_tokens
        assert 20 <= r.input_tokens <= 60 and 4 <= r.output_tokens <= 12
        shared = round(0.5 * r.input_tokens)
        assert r.prompt[:shared] == pool[:shared]
    assert plan_requests(w, plan_workload(w, None, count=20), pool) == reqs  # seeded


@pytest.mark.parametrize("hit", [0.0, 0.5])
def test_runs_on_one_server_send_no_prompt_twice(hit: float) -> None:
    # A server keeps its prefix cache between runs (capacity probes, calibration runs): the
    # same seed must not resend a prompt, or the cache hits more than the workload asks for.
    w = _workload(input_tokens=24, num_requests=12, prefix_cache_hit=hit)
    with running_fake_server(FakeServerConfig(ttft_s=0.01, itl_s=0.002)) as server:
        for _ in range(2):
            assert run_workload(Endpoint(server.url), w).feasible
    prompts = [b["prompt"] for b in server.bodies]
    assert len(prompts) >= 24
    shared = round(hit * 24)
    keys = [tuple(p[shared : shared + 4]) if isinstance(p, list) else p for p in prompts]
    assert len(set(keys)) == len(keys)  # every own part opens differently


def test_salted_prompts_keep_lengths_prefix_and_seed() -> None:
    pool = list(range(100, 400))
    w = Workload(input_tokens=40, output_tokens=8, prefix_cache_hit=0.5, num_requests=20, seed=3)
    plan = plan_workload(w, None, count=20)
    one, two = plan_requests(w, plan, pool, salt=1), plan_requests(w, plan, pool, salt=2)
    assert plan_requests(w, plan, pool, salt=1) == one  # the salt is the only new input
    for a, b in zip(one, two, strict=True):
        assert isinstance(a.prompt, list) and isinstance(b.prompt, list)
        assert len(a.prompt) == a.input_tokens == b.input_tokens
        assert a.prompt[:20] == b.prompt[:20] == pool[:20]
        assert a.prompt[24:] == b.prompt[24:]  # past the salted opening: the seeded window
    assert sum(a.prompt[20:24] != b.prompt[20:24] for a, b in zip(one, two, strict=True)) >= 19
