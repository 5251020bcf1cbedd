"""Disaggregated serving in the simulator: prefill workers hand each prompt's KV to decode workers.

One request's path, as vLLM's NIXL proxy (`toy_proxy_server.py`), SGLang's PD router and NVIDIA
Dynamo route it:
 1. a prefill worker (round-robin over the pool, in arrival order) runs the prompt as a request
    for one token: the prefill queue and the prefill itself, with that engine's admission,
    chunking and eager-prefill costs;
 2. its KV cache moves to a decode worker: each GPU moves its own shard of the prompt's KV (a
    TP shard of the KV heads; MLA's latent is whole on every rank) over the link between the
    pools, NVLink when both pools fit in one scale-up domain, else each GPU's scale-out NIC, plus
    the link's latency;
 3. the decode worker (round-robin likewise) admits it with the prompt's KV present. SGLang and
    TensorRT-LLM stream the first token the prefill worker sampled as soon as the request is
    admitted and it joins the decode batch with no step of its own; vLLM recomputes the last
    prompt position (as after a full prefix-cache hit), so its first token is that step's. The
    rest decode there.
Workers are independent engines, each simulated on its share of the requests by the aggregated
scheduler (`perf.scheduler.simulate`). Open loop the pools are exact in sequence. Closed loop
couples them (a user's next request waits for its decode to finish): the arrival times are
iterated to their fixed point (arrivals -> both pools -> completions -> arrivals), each pass
exact given the last.

Not modelled: the KV transfer's own contention for the link (each hand-off runs alone on it), a
decode worker's memory held while its KV is in flight, prefix caching across pools.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tuner.deployment import Deployment, NodeProfile
from tuner.errors import InputError
from tuner.perf.capacity import predicted_capacity
from tuner.perf.efficiency import Efficiency, resolve_efficiency
from tuner.perf.engines import EngineModel
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.perf.memory import config_kv_bytes_per_token
from tuner.perf.predict import (
    BACKEND,
    EngineSetup,
    closed_loop_cycle_s,
    engine_setup,
    sim_requests,
)
from tuner.perf.prefix_sim import prefix_metrics
from tuner.perf.scheduler import RequestSet, SimResult, simulate
from tuner.perf.summary import summarize
from tuner.specs import Context, GPUProfile, Metrics, ModelSpec, Workload

__all__ = [
    "HandoffLink",
    "disagg_capacity",
    "handoff_link",
    "handoff_s",
    "predict_disagg",
    "simulate_disagg",
]

GIGA = 1e9
MS = 1e3
# A scale-up link's datasheet figure counts both directions; a KV hand-off uses one.
DIRECTIONS = 2.0
# Closed loop: passes of the arrival fixed point, and when two passes agree (seconds).
MAX_PASSES = 40
CONVERGED_S = 1e-4


@dataclass(frozen=True)
class HandoffLink:
    """The link a prompt's KV crosses from a prefill GPU to a decode GPU."""

    name: str  # "NVLink" or the node's NIC
    bytes_per_s: float  # achievable, one direction, per GPU
    latency_s: float


def handoff_link(
    deployment: Deployment, gpu: GPUProfile, node: NodeProfile | None, eff: Efficiency
) -> HandoffLink:
    """NVLink when both pools fit in one scale-up domain, else each GPU's scale-out NIC."""
    if gpu.nvlink_gbps > 0 and deployment.gpus <= gpu.nvlink_domain:
        return HandoffLink(
            "NVLink",
            gpu.nvlink_gbps * GIGA / DIRECTIONS * eff.interconnect_fraction,
            eff.allreduce_latency_s,
        )
    if node is None:
        raise InputError(
            f"the deployment needs {deployment.gpus} GPUs, more than one {gpu.name} scale-up "
            f"domain ({gpu.nvlink_domain}), and no node profile gives the network between them: "
            "pass --node (see `tuner nodes`)"
        )
    return HandoffLink(
        f"{node.nic_gbps:g} Gb/s NIC ({node.name})",
        node.nic_bytes_per_s * eff.interconnect_fraction,
        node.nic_latency_us * 1e-6,
    )


def handoff_s(
    prompt_tokens: np.ndarray, model: ModelSpec, deployment: Deployment, link: HandoffLink
) -> np.ndarray:
    """Seconds each prompt's KV takes to cross `link` (the larger shard of the two sides)."""
    shard = max(
        config_kv_bytes_per_token(model, pool.config)
        for pool in (deployment.prefill, deployment.decode)
    )
    return link.latency_s + prompt_tokens.astype(np.float64) * shard / link.bytes_per_s


@dataclass
class _PoolRun:
    """Per-request outcome of one pool (indexed like the request set) and its counters."""

    scheduled: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    results: list[SimResult]


def _run_pool(
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    workers: int,
    setup: EngineSetup,
    preloaded: bool,
) -> _PoolRun:
    """Simulate every worker of a pool on its round-robin share (by arrival order)."""
    n = prompt.size
    run = _PoolRun(np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), [])
    order = np.argsort(arrival, kind="stable")
    # A decode worker receives the prompt's KV; an engine that streams the prefill worker's
    # first token admits it straight into decoding, else it recomputes the last prompt position
    # (EngineModel.disagg_first_token_from_prefill).
    ready = preloaded and setup.engine.disagg_first_token_from_prefill
    cached = None
    if preloaded:
        cached = prompt if ready else np.maximum(prompt - 1, 0)
    for w in range(workers):
        idx = order[w::workers]
        if idx.size == 0:
            continue
        share = RequestSet(
            prompt[idx],
            output[idx],
            arrival[idx],
            preloaded=cached[idx] if cached is not None else None,
            first_token_ready=ready,
        )
        res = simulate(share, setup.limits, setup.target, setup.spec)
        run.scheduled[idx] = res.scheduled_s
        run.first[idx] = res.first_token_s
        run.finish[idx] = res.finish_s
        run.results.append(res)
    return run


def _one_pass(
    arrival: np.ndarray,
    requests: RequestSet,
    deployment: Deployment,
    pools: tuple[EngineSetup, EngineSetup],
    moved_s: np.ndarray,
) -> tuple[_PoolRun, _PoolRun]:
    """Prefill pool on the arrivals, then the decode pool on what the hand-offs deliver."""
    prompt, output = requests.prompt_tokens, requests.output_tokens
    ones = np.ones_like(output)
    pre = _run_pool(arrival, prompt, ones, deployment.prefill.workers, pools[0], False)
    ready = pre.finish + moved_s
    ready[~np.isfinite(ready)] = np.inf
    dec = _run_pool(ready, prompt, output, deployment.decode.workers, pools[1], True)
    return pre, dec


def simulate_disagg(
    requests: RequestSet,
    deployment: Deployment,
    pools: tuple[EngineSetup, EngineSetup],
    moved_s: np.ndarray,
) -> tuple[SimResult, np.ndarray]:
    """Run the requests through both pools; (the combined result, each request's prefill end)."""
    n = requests.count
    if requests.arrival_s is not None:
        arrival = requests.arrival_s.astype(np.float64)
        pre, dec = _one_pass(arrival, requests, deployment, pools, moved_s)
    else:
        arrival = _closed_loop_guess(requests, pools[1])
        users = min(requests.users, n)
        for last in range(MAX_PASSES):
            pre, dec = _one_pass(arrival, requests, deployment, pools, moved_s)
            nxt = arrival.copy()
            nxt[users:] = np.sort(dec.finish)[: n - users]
            # Unconverged after the last pass: keep the arrivals that pass simulated, so every
            # request's times stay those of one consistent run (no first token before arrival).
            if last == MAX_PASSES - 1 or np.all(np.abs(nxt - arrival) <= CONVERGED_S):
                break
            arrival = nxt
    return _combined(requests, arrival, pre, dec), pre.finish


def _closed_loop_guess(requests: RequestSet, decode: EngineSetup) -> np.ndarray:
    """First arrivals of a closed loop: each user's first request at its start, the later ones
    one estimated cycle apart (the fixed point corrects them)."""
    n, users = requests.count, max(1, min(requests.users, requests.count))
    starts = requests.user_start_s if requests.user_start_s is not None else np.zeros(users)
    starts = np.resize(np.asarray(starts, dtype=np.float64), users)
    prompt = float(requests.prompt_tokens.mean())
    out = float(requests.output_tokens.mean())
    wl = Workload(
        input_tokens=max(1, round(prompt)), output_tokens=max(1, round(out)), concurrency=users
    )
    cycle = closed_loop_cycle_s(wl, decode.target, decode.spec, decode.limits.max_num_seqs, 0.0)
    j = np.arange(n)
    return starts[j % users] + (j // users) * cycle


def _combined(requests: RequestSet, arrival: np.ndarray, pre: _PoolRun, dec: _PoolRun) -> SimResult:
    """One SimResult over both pools: the client's view (arrival at the prefill pool, tokens
    from the decode pool), the decode pool's steps and KV, both pools' preemptions."""
    res = SimResult(
        prompt_tokens=requests.prompt_tokens.copy(),
        output_tokens=requests.output_tokens.copy(),
        arrival_s=arrival,
        scheduled_s=pre.scheduled,
        first_token_s=dec.first,
        finish_s=dec.finish,
        warmup=min(requests.warmup, max(0, requests.count - 1)),
    )
    for r in dec.results:
        res.itl_pieces.extend(r.itl_pieces)
        res.num_steps += r.num_steps
        res.num_decode_runs += r.num_decode_runs
        res.kv_peak_fraction = max(res.kv_peak_fraction, r.kv_peak_fraction)
    if dec.results:
        res.kv_mean_fraction = float(np.mean([r.kv_mean_fraction for r in dec.results]))
    for r in pre.results:
        res.prefill_tokens_computed += r.prefill_tokens_computed
        res.prefix_query_tokens += r.prefix_query_tokens
        res.prefix_hit_tokens += r.prefix_hit_tokens
    res.preemptions = sum(r.preemptions for r in pre.results + dec.results)
    return res


def predict_disagg(
    deployment: Deployment,
    ctx: Context,
    *,
    node: NodeProfile | None = None,
    eff: Efficiency | None = None,
    workload: Workload | None = None,
    engine: EngineModel | None = None,
) -> Metrics:
    """Predict a disaggregated deployment under `workload` (default `ctx.workload`)."""
    eff = resolve_efficiency(eff, ctx.gpu)
    wl = workload or ctx.workload
    if deployment.gpus > ctx.num_gpus:
        raise InputError(
            f"the deployment {deployment.shape()} needs {deployment.gpus} GPUs but "
            f"--num-gpus is {ctx.num_gpus}"
        )
    setups = []
    for phase, pool in (("prefill", deployment.prefill), ("decode", deployment.decode)):
        setup = engine_setup(pool.config, ctx, wl, eff, engine=engine)
        if isinstance(setup, Metrics):
            setup.reason = f"{phase} pool: {setup.reason}"
            return setup
        setups.append(setup)
    pools = (setups[0], setups[1])
    link = handoff_link(deployment, ctx.gpu, node, eff)
    decode = pools[1]
    requests = sim_requests(
        wl, decode.target, decode.spec, decode.limits.max_num_seqs, eff.request_overhead_s
    )
    moved = handoff_s(requests.prompt_tokens, ctx.model, deployment, link)
    result, prefilled = simulate_disagg(requests, deployment, pools, moved)
    unfinished = int((~np.isfinite(result.finish_s)).sum())
    if unfinished:
        return Metrics.infeasible(
            f"{unfinished} of {requests.count} requests could never be scheduled "
            f"(decode KV capacity {decode.plan.kv_capacity_tokens} tokens)",
            BACKEND,
            weights_gib=decode.plan.weights_gib,
            kv_capacity_tokens=decode.plan.kv_capacity_tokens,
        )
    metrics = summarize(result, decode.plan, ctx.sla, deployment.gpus, BACKEND)
    metrics.extra.update(prefix_metrics(result))
    keep = slice(result.warmup, None)
    metrics.extra.update(
        {
            "deployment": deployment.shape(),
            "engine": decode.engine.name,
            "engine_version": decode.engine.version,
            "handoff_link": link.name,
            "handoff_ms_p50": float(np.median(moved[keep]) * MS),
            "prefill_ms_p50": float(np.median((prefilled - result.arrival_s)[keep]) * MS),
            "prefill_gpus": deployment.prefill.gpus,
            "decode_gpus": deployment.decode.gpus,
        }
    )
    return metrics


def disagg_capacity(
    deployment: Deployment,
    ctx: Context,
    *,
    node: NodeProfile | None = None,
    eff: Efficiency | None = None,
    mode: LoadMode = "rate",
    budget: ProbeBudget | None = None,
    operating_point: bool = True,
    saturated_rps: float | None = None,
) -> tuple[Capacity, Metrics]:
    """The simulator's capacity search for a disaggregated deployment (per GPU of both pools).

    `saturated_rps`: the prefill pool's saturated prompt rate, which no load can exceed (every
    request is prefilled there); without it a burst of requests measures saturation.
    """
    eff = resolve_efficiency(eff, ctx.gpu)
    return predicted_capacity(
        lambda wl: predict_disagg(deployment, ctx, node=node, eff=eff, workload=wl),
        deployment.gpus,
        ctx,
        mode=mode,
        budget=budget,
        operating_point=operating_point,
        saturated_rps=saturated_rps,
    )
