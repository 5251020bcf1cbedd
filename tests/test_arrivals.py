"""Steady-state load: one seeded trace for sim, replay and loadgen; warm-up; desync; --lengths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _fake_openai import FakeServerConfig, running_fake_server
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner import catalog
from tuner.bench.arrivals import plan_workload
from tuner.bench.lengths import load_length_pairs
from tuner.bench.loadgen import Endpoint, LoadOptions, run_workload
from tuner.bench.prompts import plan_requests
from tuner.bench.stats import RequestResult, aggregate_steady
from tuner.cli.app import app
from tuner.engine.replay import send_times
from tuner.errors import InputError
from tuner.perf.costs import step_cost_model
from tuner.perf.memory import plan_memory
from tuner.perf.predict import closed_loop_cycle_s, predict_metrics, sim_requests
from tuner.perf.scheduler import SchedulerLimits, simulate
from tuner.perf.summary import summarize
from tuner.specs import SLA, Context, EngineConfig, Workload

MODEL = catalog.load_model("llama-3.1-8b")
GPU = catalog.load_gpu("h200-sxm")
CONFIG = EngineConfig()
COST = step_cost_model(MODEL, GPU, CONFIG)
PLAN = plan_memory(MODEL, GPU, CONFIG, Workload())
LIMITS = SchedulerLimits(
    max_num_seqs=256, max_num_batched_tokens=8192, kv_capacity_blocks=PLAN.kv_capacity_blocks
)


def _ctx(**kw: object) -> Context:
    return Context(model=MODEL, gpu=GPU, sla=SLA(name="none"), workload=Workload(**kw))  # type: ignore[arg-type]


def test_request_count_is_sized_from_the_load() -> None:
    assert Workload(concurrency=8).measured_requests == 200
    assert Workload(concurrency=128).measured_requests == 512  # 4 measured rounds per user
    assert Workload(concurrency=128).warmup_count == 128  # one ramp-up request per user
    assert Workload(rate_rps=5.0).warmup_count == 20
    w = Workload(concurrency=4, num_requests=10, warmup_requests=2)
    assert (w.measured_requests, w.warmup_count, w.total_requests) == (10, 2, 12)


@settings(max_examples=30, deadline=None)
@given(
    users=st.integers(1, 24),
    rate=st.sampled_from([None, 3.0, 40.0]),
    spread=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 5),
)
def test_one_seed_gives_one_trace_in_sim_replay_and_loadgen(
    users: int, rate: float | None, spread: float, seed: int
) -> None:
    concurrency = None if rate else users
    wl = Workload(input_tokens=300, output_tokens=40, length_spread=spread, rate_rps=rate,
                  concurrency=concurrency, num_requests=30, seed=seed)  # fmt: skip
    plan = plan_workload(wl, None)
    again = plan_workload(wl, None)
    assert np.array_equal(plan.input_tokens, again.input_tokens)
    assert np.array_equal(plan.output_tokens, again.output_tokens)
    sim = sim_requests(wl, COST, None, 256, 0.0)  # what the simulator runs
    assert np.array_equal(sim.prompt_tokens, plan.input_tokens)
    assert np.array_equal(sim.output_tokens, plan.output_tokens)
    prompts = plan_requests(wl, plan, list(range(1000, 3000)))  # what replay and loadgen send
    assert [p.input_tokens for p in prompts] == plan.input_tokens.tolist()
    assert [p.output_tokens for p in prompts] == plan.output_tokens.tolist()
    assert all(isinstance(p.prompt, list) and len(p.prompt) == p.input_tokens for p in prompts)
    cycle = closed_loop_cycle_s(wl, COST, None, 256, 0.0)  # the sim's ramp
    due = send_times(plan, cycle)  # when replay sends the requests known in advance
    if rate is None:
        assert sim.user_start_s is not None and cycle > 0
        assert np.allclose(due[: plan.users], sim.user_start_s)
        assert np.allclose(sim.user_start_s, plan.user_start_s(cycle))
    else:
        assert sim.arrival_s is not None and np.allclose(due, sim.arrival_s)
    assert sim.warmup == plan.warmup == wl.warmup_count


def test_loadgen_sends_the_planned_lengths_in_order() -> None:
    wl = Workload(input_tokens=12, output_tokens=6, length_spread=0.5, rate_rps=40.0,
                  num_requests=8, seed=4)  # fmt: skip
    plan = plan_workload(wl, None)
    with running_fake_server(FakeServerConfig(ttft_s=0.005, itl_s=0.002)) as server:
        m = run_workload(Endpoint(server.url), wl, options=LoadOptions(probe_requests=0))
    sent = [(len(b["prompt"]), b["max_tokens"]) for b in server.bodies]
    planned = list(zip(plan.input_tokens.tolist(), plan.output_tokens.tolist(), strict=True))
    assert sorted(sent) == sorted(planned)  # async sends may reorder by a few microseconds
    assert m.num_requests == 8 and m.warmup_requests == plan.warmup == 1


@settings(max_examples=20, deadline=None)
@given(users=st.integers(1, 16), warmup=st.integers(0, 20), seed=st.integers(0, 3))
def test_warmup_requests_never_enter_the_statistics(users: int, warmup: int, seed: int) -> None:
    wl = Workload(input_tokens=500, output_tokens=30, length_spread=0.5, concurrency=users,
                  num_requests=24, warmup_requests=warmup, seed=seed)  # fmt: skip
    res = simulate(sim_requests(wl, COST, None, 256, 0.0), LIMITS, COST)
    m = summarize(res, PLAN, SLA(name="none"), 1)
    assert m.num_requests == 24 and m.warmup_requests == warmup
    ttft = (res.first_token_s - res.arrival_s)[warmup:]
    assert m.ttft_ms.mean == pytest.approx(1e3 * ttft.mean())
    assert (
        m.output_tokens_per_s * m.extra["duration_s"]
        == pytest.approx(  # type: ignore[operator]
            res.output_tokens[warmup:].sum()
        )
    )


def test_measured_backends_drop_warmup_results() -> None:
    slow = RequestResult(success=True, output_tokens=2, requested_output_tokens=2, ttft_s=9.0,
                         e2e_s=9.5, itl_s=[0.5])  # fmt: skip
    fast = [RequestResult(success=True, output_tokens=2, requested_output_tokens=2, ttft_s=0.1,
                          e2e_s=0.2, itl_s=[0.1], start_s=10.0 + i) for i in range(4)]  # fmt: skip
    m = aggregate_steady([slow, slow, *fast], 2, backend="bench")
    assert m.num_requests == 4 and m.warmup_requests == 2
    assert m.ttft_ms.mean == pytest.approx(100.0) and m.extra["duration_s"] == pytest.approx(3.2)


def test_closed_loop_users_desynchronise() -> None:
    # The case: identical lengths, 16 users, long outputs.
    wl = Workload(input_tokens=2000, output_tokens=500, concurrency=16, num_requests=64)
    staggered = simulate(sim_requests(wl, COST, None, 256, 0.008), LIMITS, COST)
    lockstep_wl = wl.model_copy(update={"ramp_s": 0.0})
    lockstep = simulate(sim_requests(lockstep_wl, COST, None, 256, 0.008), LIMITS, COST)
    first_round = staggered.arrival_s[:16]
    later_round = staggered.arrival_s[16:32]
    assert len(np.unique(first_round)) == 16
    # Users whose prefills share a step finish together, so a few may pair up; most stay apart.
    assert len(np.unique(later_round)) >= 12
    assert len(np.unique(later_round)) > len(np.unique(lockstep.arrival_s[16:32]))
    assert first_round.max() > 0.5 * (staggered.finish_s[0] - staggered.arrival_s[0])

    def mean_ttft(r: object) -> float:
        m = summarize(r, PLAN, SLA(name="none"), 1)  # type: ignore[arg-type]
        return m.ttft_ms.mean

    assert mean_ttft(staggered) < 0.5 * mean_ttft(lockstep)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_lengths_file_is_sampled_with_the_seed(tmp_path: Path) -> None:
    csv_file = _write(tmp_path, "l.csv", "input_tokens,output_tokens\n100,10\n2000,300\n50,7\n")
    jsonl = _write(tmp_path, "l.jsonl", "\n".join(
        json.dumps({"prompt_tokens": i, "completion_tokens": o})
        for i, o in ((100, 10), (2000, 300), (50, 7))))  # fmt: skip
    assert load_length_pairs(csv_file).tolist() == load_length_pairs(jsonl).tolist()
    wl = Workload(concurrency=4, num_requests=40, lengths_file=csv_file, seed=7)
    pairs = load_length_pairs(csv_file)
    a, b = plan_workload(wl, pairs), plan_workload(wl, pairs)
    other = plan_workload(wl.model_copy(update={"seed": 8}), pairs)
    got = set(zip(a.input_tokens.tolist(), a.output_tokens.tolist(), strict=True))
    assert got == {(100, 10), (2000, 300), (50, 7)}
    assert np.array_equal(a.input_tokens, b.input_tokens)
    assert not np.array_equal(a.input_tokens, other.input_tokens)
    m = predict_metrics(CONFIG, _ctx(concurrency=4, num_requests=40, lengths_file=csv_file))
    assert m.feasible and m.num_requests == 40


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("a.csv", "input_tokens,output_tokens\n100,x\n", "a.csv:2: length 'x'"),
        ("b.csv", "prompt,answer\n1,2\n", "lacks a length column"),
        ("c.jsonl", '{"isl": 10, "osl": 0}\n', "c.jsonl:1: length 0"),
        ("d.jsonl", "{not json\n", "d.jsonl:1: not JSON"),
        ("e.csv", "isl,osl\n", "no length pairs"),
    ],
)
def test_bad_lengths_file_is_one_error_line(
    tmp_path: Path, name: str, text: str, needle: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(InputError) as info:
        load_length_pairs(path)
    assert needle in str(info.value) and "\n" not in str(info.value)
    result = CliRunner().invoke(app, ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm",
                                      "--concurrency", "2", "--lengths", path])  # fmt: skip
    assert result.exit_code == 2
    assert needle in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_missing_lengths_file_is_one_error_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm",
                                      "--lengths", str(tmp_path / "none.csv")])  # fmt: skip
    assert result.exit_code == 2 and "cannot read" in result.output
