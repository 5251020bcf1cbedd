"""The binding limit: what stops a variant's load from rising past its capacity, and why.

Two answers, from the capacity search and the simulator's counters at the capacity load:
- the bound: the SLA bound (at the SLA percentile) that breaks at the first probed load above
  the capacity; else saturation (the SLA still holds at the saturated rate, past which the
  queue grows without bound), the top of the searched load, or the probe budget;
- the driver: what the engine is short of there: KV-cache blocks (preemptions, a full cache),
  the max_num_seqs slots, queueing (TTFT is mostly waiting), the step token budget (every prompt
  split over several steps), prefill work, or the largest kernel group of a decode step (weight
  or KV reads: memory bandwidth; GEMM or attention compute; all-reduce; fixed host overhead).

A user who knows the driver knows which knob can move it: more KV memory or fp8 KV for the
cache, a larger max_num_seqs for the slots, fp8 weights or TP for weight reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tuner.errors import TunerError
from tuner.metrics import Metrics
from tuner.perf.costs import step_cost_model
from tuner.perf.efficiency import Efficiency, resolve_efficiency
from tuner.perf.load import Capacity, LoadPoint, load_unit, workload_at
from tuner.perf.memory import replica_shape
from tuner.sla import Violation, sla_violations
from tuner.specs import Context, EngineConfig

__all__ = [
    "BINDING_COLUMNS",
    "DRIVERS",
    "EVIDENCE_KEYS",
    "Bound",
    "BindingLimit",
    "binding_extra",
    "binding_for",
    "binding_limit",
]

Bound = Literal["ttft", "tpot", "saturation", "load-searched", "probe-budget", "unmet"]

# What each driver means, in the words the summary and the report print.
DRIVERS = {
    "kv-cache": "KV-cache capacity",
    "max_num_seqs": "the max_num_seqs batch slots",
    "queueing": "queueing (bursts wait for a busy engine)",
    "max_num_batched_tokens": "the max_num_batched_tokens step budget",
    "prefill": "prefill compute",
    "prefill-interference": "prefill chunks in the decode steps",
    "weight_reads": "memory bandwidth (weight reads)",
    "kv_reads": "memory bandwidth (KV reads)",
    "gemm_compute": "compute (GEMMs)",
    "attention_compute": "compute (attention)",
    "moe_experts": "the MoE expert layers",
    "all_reduce": "the interconnect (all-reduce)",
    "lm_head": "the LM head",
    "fixed_overhead": "fixed per-step overhead",
    "sampling": "per-sequence host work",
}
# Columns of trials.csv and pareto.csv (read from Metrics.extra).
BINDING_COLUMNS = ("binding", "binding_driver", "binding_evidence")

# The evidence figures Metrics.extra carries as binding_<key> (best.yaml's binding block).
EVIDENCE_KEYS = (
    "utilisation",
    "mean_batch",
    "max_batch",
    "kv_peak",
    "preemptions",
    "queue_share",
    "prefill_share",
    "decode_step_ms",
)

# A cache this full admits no new sequence: admission waits on KV blocks.
_KV_FULL = 0.98
# A mean batch this close to max_num_seqs means the slots, not the work, cap the batch.
_SLOTS_FULL = 0.9
# Slots under this fraction of the sequences the KV cache holds cap the batch, not the cache.
_FEW_SLOTS = 0.5
# TTFT mostly spent waiting for a slot or a step: queueing, not prefill, sets it.
_QUEUE_SHARE = 0.5
# A TPOT this much above a pure decode step's time is spent in prefill chunks mixed in.
_INTERFERENCE = 1.5


class BindingLimit(BaseModel):
    """What stops the load of one variant from rising, with the simulator's evidence."""

    bound: Bound
    driver: str = Field(description="A key of DRIVERS: what the engine is short of")
    bound_text: str
    driver_text: str
    percentile: int
    capacity_load: float | None = None
    above_load: float | None = Field(default=None, description="First probe over the SLA")
    violation: str | None = Field(default=None, description="The broken bound there")
    utilisation: float | None = Field(default=None, description="Capacity / saturated load")
    mean_batch: float = Field(description="Sequences in the engine (Little's law)")
    max_batch: int
    kv_peak: float
    preemptions: int
    queue_share: float = Field(description="Queue wait / TTFT at the SLA percentile")
    prefill_share: float = Field(description="Prefill's share of the engine time per request")
    decode_step_ms: float
    decode_parts: dict[str, float] = Field(description="Share of a decode step per kernel group")

    @property
    def text(self) -> str:
        """Both answers in one line (CSV cells, best.yaml)."""
        return f"{self.bound_text}; {self.driver_text}"


def _worst(point: LoadPoint, ctx: Context) -> Violation | None:
    m = Metrics(ttft_ms=point.ttft_ms, tpot_ms=point.tpot_ms)
    missed = [v for v in sla_violations(m, ctx.sla) if not v.met]
    return max(missed, key=lambda v: v.relative) if missed else None


def _bound(cap: Capacity, ctx: Context, unit: str) -> tuple[Bound, str, LoadPoint | None, str]:
    """(bound, its text, the probe that broke the SLA, the violation there)."""
    pct, top = ctx.sla.percentile, cap.at_sla
    if top is None:
        light = cap.points[0] if cap.points else None
        v = _worst(light, ctx) if light else None
        if light is None or v is None:
            return "unmet", "no load meets the SLA (none was probed)", None, ""
        text = f"no load meets the SLA: even {light.load:.3g} {unit} gives {v.describe(pct)}"
        return "unmet", text, light, v.describe(pct)
    above = [p for p in cap.points if p.load > top.load and not p.meets_sla]
    first = min(above, key=lambda p: p.load) if above else None
    v = _worst(first, ctx) if first else None
    if first is not None and v is not None:
        text = (
            f"{v.metric} P{pct} <= {v.bound_ms:g} ms: {v.value_ms:.1f} ms at "
            f"{first.load:.3g} {unit}"
        )
        return ("ttft" if v.metric == "TTFT" else "tpot"), text, first, v.describe(pct)
    if cap.saturated_load is not None:
        text = (
            f"saturation: the SLA holds up to the saturated rate {cap.saturated_load:.3g} "
            f"{unit}, past which the queue grows without bound"
        )
        return "saturation", text, None, ""
    if cap.budget_exhausted:
        text = f"the probe budget ran out at {top.load:.3g} {unit} with the SLA still met"
        return "probe-budget", text, None, ""
    text = f"the SLA holds at the top of the searched load, {top.load:.3g} {unit}"
    return "load-searched", text, None, ""


def _driver(
    bound: Bound,
    ttft_side: bool,
    ev: dict[str, float],
    parts: dict[str, float],
    config: EngineConfig,
    ctx: Context,
) -> str:
    if ev["preemptions"] > 0 or ev["kv_peak"] >= _KV_FULL:
        return "kv-cache"
    if ev["mean_batch"] >= _SLOTS_FULL * ev["max_batch"]:
        return "max_num_seqs"
    if ttft_side:
        if ev["queue_share"] >= _QUEUE_SHARE:
            # Waits behind far fewer slots than the cache holds: the slots set the saturation.
            few_slots = ev["max_batch"] < _FEW_SLOTS * ev["kv_sequences"]
            return "max_num_seqs" if few_slots else "queueing"
        chunked = config.enable_chunked_prefill
        if chunked and config.max_num_batched_tokens < ctx.workload.input_tokens:
            return "max_num_batched_tokens"
        return "prefill"
    if bound == "tpot" and ev["tpot_ms"] > _INTERFERENCE * ev["decode_token_ms"]:
        return "prefill-interference"
    if bound == "saturation" and ev["prefill_share"] > 0.5:
        return "prefill"
    return max(parts, key=lambda k: parts[k])


def _driver_text(driver: str, ev: dict[str, float], parts: dict[str, float]) -> str:
    mean = ev["mean_batch"]
    batch = f"batch {mean:.1f}" if mean < 10 else f"batch {mean:.0f}"
    batch += f" of {ev['max_batch']:.0f}"
    kv = f"KV peak {ev['kv_peak']:.0%}, {ev['preemptions']:.0f} preemptions"
    step = f"decode step {ev['decode_step_ms']:.1f} ms at {batch}"
    if driver in parts:
        evidence = f"{parts[driver]:.0%} of the {step}; {kv}"
    elif driver in ("queueing", "prefill", "max_num_batched_tokens"):
        evidence = (
            f"queue {ev['queue_share']:.0%} of TTFT, prefill {ev['prefill_share']:.0%} "
            f"of engine time; {batch}"
        )
    elif driver == "prefill-interference":
        evidence = (
            f"TPOT {ev['tpot_ms']:.1f} ms vs {ev['decode_token_ms']:.1f} ms per token of a "
            f"pure decode step; {batch}"
        )
    elif driver == "max_num_seqs":
        evidence = (
            f"{batch}, queue {ev['queue_share']:.0%} of TTFT; the KV cache holds "
            f"{ev['kv_sequences']:.0f} sequences"
        )
    else:
        evidence = f"{batch}; {kv}"
    if ev.get("prefix_hit", 0.0) > 0:
        evidence += f"; prefix cache hits {ev['prefix_hit']:.0%} of prompt tokens"
    return f"limited by {DRIVERS[driver]} ({evidence}; simulator)"


def _evidence(
    config: EngineConfig, ctx: Context, m: Metrics, eff: Efficiency
) -> tuple[dict[str, float], dict[str, float]]:
    """Utilisation figures at the capacity load, and a decode step's shares by kernel group."""
    wl, pct = ctx.workload, ctx.sla.percentile
    _, dp = replica_shape(config)
    context = wl.input_tokens + wl.output_tokens / 2.0
    target = step_cost_model(ctx.model, ctx.gpu, config, eff, context=context)
    mean_batch = m.requests_per_s * max(0.0, m.e2e_ms.mean - m.queue_ms.mean) / 1e3
    batch = max(1, round(mean_batch))
    parts_s = target.decode_parts(batch, context)
    step_s = sum(parts_s.values())
    tps = float(m.extra.get("tokens_per_step") or 1.0)
    # Prompt tokens a prefix-cache hit skips (the trace's emergent rate, else the stated one)
    # cost no prefill: the share of engine time the prompts take shrinks with the hit rate.
    hit = m.extra.get("prefix_cache_hit_rate")
    if not isinstance(hit, float | int):
        hit = wl.prefix_cache_hit if config.enable_prefix_caching else 0.0
    fresh = max(1.0, wl.input_tokens * (1.0 - float(hit)))
    prefill_s = target.step_s(fresh, 1, 0.0, target.prefill_attn_s(fresh, wl.input_tokens - fresh))
    decode_per_request_s = wl.output_tokens / tps * step_s / batch
    ttft = m.ttft_ms.at(pct)
    ev = {
        "mean_batch": mean_batch,
        "max_batch": float(config.max_num_seqs * dp),
        "kv_peak": m.kv_utilization,
        "preemptions": float(m.preemptions),
        "queue_share": m.queue_ms.at(pct) / ttft if ttft > 0 else 0.0,
        "prefill_share": prefill_s / (prefill_s + decode_per_request_s),
        "decode_step_ms": step_s * 1e3,
        "decode_token_ms": step_s * 1e3 / tps,
        "tpot_ms": m.tpot_ms.at(pct),
        "kv_sequences": m.kv_capacity_tokens / (wl.input_tokens + wl.output_tokens),
        "prefix_hit": float(hit),
    }
    return ev, {k: v / step_s for k, v in parts_s.items() if v > 0}


def binding_limit(
    config: EngineConfig,
    ctx: Context,
    cap: Capacity,
    at_capacity: Metrics,
    eff: Efficiency | None = None,
) -> BindingLimit:
    """The bound and the driver of `config`'s capacity; `at_capacity`: the simulator's Metrics
    at the capacity load (at the lightest load when none meets the SLA)."""
    unit = load_unit(cap.mode)
    bound, bound_text, above, violation = _bound(cap, ctx, unit)
    top, sat = cap.at_sla, cap.saturated_load
    if bound in ("ttft", "tpot") and top is not None and sat:
        bound_text += f" (capacity {top.load:.3g}, {top.load / sat:.0%} of saturation)"
    ev, parts = _evidence(config, ctx, at_capacity, resolve_efficiency(eff, ctx.gpu))
    ttft_side = bound == "ttft" or (bound == "unmet" and violation.startswith("TTFT"))
    driver = _driver(bound, ttft_side, ev, parts, config, ctx)
    return BindingLimit(
        bound=bound,
        driver=driver,
        bound_text=bound_text,
        driver_text=_driver_text(driver, ev, parts),
        percentile=ctx.sla.percentile,
        capacity_load=top.load if top else None,
        above_load=above.load if above is not None and top is not None else None,
        violation=violation or None,
        utilisation=top.load / sat if top and sat else None,
        mean_batch=ev["mean_batch"],
        max_batch=int(ev["max_batch"]),
        kv_peak=ev["kv_peak"],
        preemptions=int(ev["preemptions"]),
        queue_share=ev["queue_share"],
        prefill_share=ev["prefill_share"],
        decode_step_ms=ev["decode_step_ms"],
        decode_parts=parts,
    )


def binding_for(
    config: EngineConfig, ctx: Context, cap: Capacity, metrics: Metrics
) -> BindingLimit | None:
    """The binding limit of a finished capacity search on any backend: a measured search's
    bound is measured, its evidence comes from the simulator at the same load (None: the
    simulator cannot model the variant)."""
    from tuner.backends.sim import SimBackend  # the backends package imports this module

    top = cap.at_sla or (cap.points[0] if cap.points else None)
    try:
        if metrics.backend == "sim":
            return binding_limit(config, ctx, cap, metrics)
        if top is None:
            return None
        at = ctx.model_copy(update={"workload": workload_at(ctx.workload, cap.mode, top.load)})
        sim = SimBackend().evaluate(config, at)
        return binding_limit(config, ctx, cap, sim) if sim.feasible else None
    except (TunerError, ValueError, ArithmeticError, LookupError):
        return None  # an explanation the model cannot give never fails the measured trial


def binding_extra(b: BindingLimit | None) -> dict[str, float | int | str | bool | None]:
    """The binding limit as Metrics.extra scalars (CSV columns; best.yaml reads them back)."""
    if b is None:
        return {}
    dumped = b.model_dump()
    return {
        "binding": b.bound,
        "binding_driver": b.driver,
        "binding_evidence": b.text,
        "binding_bound_text": b.bound_text,
        "binding_driver_text": b.driver_text,
        **{f"binding_{k}": dumped[k] for k in EVIDENCE_KEYS},
    }
