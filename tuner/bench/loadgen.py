"""Load generator for OpenAI-compatible servers (vLLM, SGLang, TensorRT-LLM, llama.cpp).

Streams `/v1/completions` or `/v1/chat/completions` requests, open-loop (Poisson arrivals) or
closed-loop (N users), times every chunk and aggregates with `tuner.bench.stats` (vLLM
`bench serve` definitions). Lengths, arrival times, staggered user starts and the warm-up
requests come from `tuner.bench.arrivals` (the same trace as the simulator and the engine
replay for one seed); warm-up requests run inside the load and are left out of the statistics.
Input lengths are exact when the server can tokenize (`/tokenize`, vLLM and SGLang):
completions then send token-id prompts cut from a tokenized corpus. Output
lengths are exact when the server honours `ignore_eos` / `min_tokens`; a probe request sent alone
before the load checks that (and times one request, the default ramp closed-loop users start
over), and every request's `usage.completion_tokens` is checked against what was asked.

A request counts as served only when its stream ends in `data: [DONE]` with no error event (vLLM
sends `data: {"error": ...}` when it aborts a generation); its output tokens are what was
streamed: the content chunks, or the server's `usage` count when that lies between the chunks
seen and the `max_tokens` asked (a chunk may carry several speculative tokens). SSE lines and
error bodies are read up to a byte cap. `LoadOptions.deadline` bounds the whole run: past it no
request is sent, in-flight ones are cut, and the Metrics say so (`BUDGET_CUT`).

The HTTP session with the server (pre-flight checks, request bodies, one stream timed into a
result) is `tuner.bench.http_client`; reading the stream within byte caps is `tuner.bench.sse`.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from tuner.bench.arrivals import ArrivalPlan, plan_workload
from tuner.bench.http_client import (
    PREFLIGHT_TIMEOUT_S,
    BudgetCut,
    Endpoint,
    LoadOptions,
    ServerClient,
)
from tuner.bench.messages import check_url
from tuner.bench.prompts import PlannedRequest, plan_requests
from tuner.bench.sse import MAX_ERROR_BODY_BYTES, MAX_SSE_LINE_BYTES
from tuner.bench.stats import BUDGET_CUT, RequestResult, aggregate_steady
from tuner.bench.trace_plan import workload_plan
from tuner.specs import SLA, Metrics, Workload

__all__ = [
    "MAX_ERROR_BODY_BYTES",
    "MAX_SSE_LINE_BYTES",
    "Endpoint",
    "LoadOptions",
    "PlannedRequest",
    "ProgressFn",
    "plan_requests",
    "run_workload",
    "arun_workload",
    "check_endpoint",
    "check_url",
]

ProgressFn = Callable[[int, int], None]  # (finished requests, total requests)

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def _open_loop(
    client: ServerClient, reqs: list[PlannedRequest], plan: ArrivalPlan, done: Callable
) -> list[RequestResult]:
    assert plan.arrival_s is not None
    t0 = time.perf_counter()
    tasks = []
    for req, at in zip(reqs, plan.arrival_s.tolist(), strict=True):
        wait_s = max(0.0, at - (time.perf_counter() - t0))
        left = client.time_left()
        if left is not None and wait_s >= left:
            break  # the budget ends before this arrival: nothing more is sent
        await asyncio.sleep(wait_s)
        tasks.append(asyncio.create_task(done(client.send(req, t0))))
    # Each send waits at most the budget left, so this returns by the deadline.
    return list(await asyncio.gather(*tasks))


async def _closed_loop(
    client: ServerClient, reqs: list[PlannedRequest], starts_s: list[float], done: Callable
) -> list[RequestResult]:
    """User u sends request u at `starts_s[u]`, then the next unsent index after each finish."""
    results: list[RequestResult | None] = [None] * len(reqs)
    queue = iter(range(len(starts_s), len(reqs)))
    t0 = time.perf_counter()

    async def user(u: int) -> None:
        wait_s = max(0.0, starts_s[u] - (time.perf_counter() - t0))
        left = client.time_left()
        if left is not None and wait_s >= left:
            return  # the budget ends before this user starts
        await asyncio.sleep(wait_s)
        results[u] = await done(client.send(reqs[u], t0))
        for i in queue:
            if client.expired():
                return  # past the budget no user sends again
            results[i] = await done(client.send(reqs[i], t0))

    await asyncio.gather(*(user(u) for u in range(len(starts_s))))
    return [r for r in results if r is not None]


async def _prompts(
    client: ServerClient, endpoint: Endpoint, workload: Workload, plan: ArrivalPlan, probes: int
) -> tuple[list[PlannedRequest], list[PlannedRequest], bool]:
    """The run's requests, its probe requests, and whether they are token ids (exact lengths:
    the server tokenizes the corpus for us) rather than text."""
    max_isl = int(plan.input_tokens.max())
    pool = (
        await client.token_pool(max_isl, workload.seed) if endpoint.api == "completions" else None
    )
    # A fresh salt per run: the seed alone would resend a run's prompts to a server that kept
    # them in its prefix cache (every capacity probe, every calibration run), hits the workload
    # does not ask for and `vllm bench serve`'s random prompts never get.
    salt = secrets.randbits(62)
    reqs = plan_requests(workload, plan, pool, salt=salt)
    # Probes at the mean lengths (no spread, no lengths file), content of another seed.
    mean = plan_workload(workload.model_copy(update={"length_spread": 0.0}), None, count=probes)
    probe = plan_requests(workload, mean, pool, seed_offset=1, salt=salt + 1)
    return reqs, probe, pool is not None


async def arun_workload(
    endpoint: Endpoint,
    workload: Workload,
    *,
    options: LoadOptions | None = None,
    sla: SLA | None = None,
    backend: str = "bench",
    num_gpus: int = 1,
    on_progress: ProgressFn | None = None,
    on_measure_start: Callable[[], None] | None = None,
) -> Metrics:
    """Benchmark `endpoint` with `workload` (warm-up excluded) and aggregate the measurements.

    `on_measure_start` runs after the probe, just before the load (warm-up requests included)
    starts (a backend snapshots server counters there).
    """
    options = options or LoadOptions()
    plan = workload_plan(workload)  # sampled lengths, or a trace's requests and block ids
    client = ServerClient(endpoint, options, max_connections=plan.users + plan.count)
    try:
        await client.resolve_model()
        reqs, probe, exact = await _prompts(
            client, endpoint, workload, plan, options.probe_requests
        )
        try:
            probe_e2e_s = await client.probe(probe)
        except BudgetCut:
            return _budget_spent(backend, "before the load started (during the probe request)")
        finished = 0

        async def done(coro: Any) -> RequestResult:
            nonlocal finished
            result: RequestResult = await coro
            finished += 1
            if on_progress:
                on_progress(finished, len(reqs))
            return result

        if on_measure_start:
            on_measure_start()
        if plan.arrival_s is not None:
            results = await _open_loop(client, reqs, plan, done)
        else:
            ramp_s = workload.start_ramp_s if workload.start_ramp_s is not None else probe_e2e_s
            starts = plan.user_start_s(ramp_s).tolist()
            results = await _closed_loop(client, reqs, starts, done)
    finally:
        await client.aclose()
    # A request the budget cut is not a failure of the server: it is left out, and the Metrics
    # say the load was cut (a capacity search then stops instead of reading a partial probe).
    cut = sum(r.cut for r in results)
    results = [r for r in results if not r.cut]
    unsent = len(reqs) - len(results) - cut
    if not results:
        return _budget_spent(backend, "before any request finished")
    metrics = aggregate_steady(results, plan.warmup, backend=backend, sla=sla, num_gpus=num_gpus)
    if cut or unsent:
        metrics.extra.update({BUDGET_CUT: True, "budget_cut_requests": cut + unsent})
    metrics.extra.update(
        model=client.model,
        api=endpoint.api,
        input_tokens_exact=exact,
        output_tokens_exact=client.exact_output and metrics.extra["output_length_mismatches"] == 0,
        output_tokens_from="usage" if client.usage_seen else "chunks",
        probe_requests=options.probe_requests,
        arrival=f"poisson {workload.rate_rps:g} rps"
        if workload.rate_rps is not None
        else f"closed loop {plan.users} users",
    )
    return metrics


def _budget_spent(backend: str, when: str) -> Metrics:
    """The infeasible Metrics of a load the time budget stopped `when`."""
    return Metrics.infeasible(f"the time budget ran out {when}", backend, extra={BUDGET_CUT: True})


def check_endpoint(endpoint: Endpoint, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> str:
    """The model `endpoint` serves (its own or the first listed); BackendError if unreachable."""

    async def check() -> str:
        client = ServerClient(endpoint, LoadOptions(timeout_s=timeout_s), max_connections=1)
        try:
            await client.resolve_model()
        finally:
            await client.aclose()
        return client.model

    return asyncio.run(check())


def _synchronous(fn: Callable[_P, Coroutine[Any, Any, _T]]) -> Callable[_P, _T]:
    """`fn` run to completion in its own event loop."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return asyncio.run(fn(*args, **kwargs))

    return run


# The same arguments as arun_workload, for callers outside an event loop.
run_workload = _synchronous(arun_workload)
