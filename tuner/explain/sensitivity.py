"""One-knob sensitivity: the recommended variant's capacity as each knob alone moves.

Every neighbour is predicted by the simulator, the recommended variant too, so each change is
simulator against simulator (on a measured run as well: measuring every neighbour would cost an
engine start each). Capacity is the served req/s per GPU at the SLA itself (no headroom), the
quantity that ranks variants.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tuner.backends import evaluate_capacity
from tuner.backends.sim import SimBackend
from tuner.knobs import searched
from tuner.perf.load import LoadMode
from tuner.result_io import write_atomic
from tuner.search.study import config_from_params, grid_values, sampling_space
from tuner.specs import Context, EngineConfig, SearchSpace

__all__ = [
    "SENSITIVITY_COLUMNS",
    "KnobEffect",
    "effect_text",
    "knob_sensitivity",
    "top_effects",
    "write_sensitivity_csv",
]

SENSITIVITY_COLUMNS = (
    "knob",
    "base_value",
    "value",
    "capacity_rps_per_gpu",
    "base_capacity_rps_per_gpu",
    "change_pct",
    "reason",
)


class KnobEffect(BaseModel):
    """The recommended variant with one knob moved to another value, and what that did."""

    knob: str
    base_value: Any
    value: Any
    capacity_rps_per_gpu: float | None = Field(description="None: the variant cannot run")
    base_capacity_rps_per_gpu: float
    reason: str | None = Field(default=None, description="Why it cannot run, or misses the SLA")

    @property
    def change_pct(self) -> float | None:
        """Capacity change against the recommended variant, in percent (None: cannot run)."""
        if self.capacity_rps_per_gpu is None or self.base_capacity_rps_per_gpu <= 0:
            return None
        return (self.capacity_rps_per_gpu / self.base_capacity_rps_per_gpu - 1.0) * 100.0


def _label(value: Any) -> str:
    # A value read back from sensitivity.csv is already its label.
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(getattr(value, "value", value))


def effect_text(e: KnobEffect) -> str:
    """One line: "quantization fp8 instead of fp16: +27%" (or why the variant cannot run)."""
    head = f"{e.knob} {_label(e.value)} instead of {_label(e.base_value)}"
    pct = e.change_pct
    return f"{head}: {pct:+.0f}%" if pct is not None else f"{head}: cannot run ({e.reason})"


def _capacity(config: EngineConfig, ctx: Context, mode: LoadMode) -> tuple[float | None, str]:
    cap, metrics = evaluate_capacity(SimBackend(), config, ctx, mode=mode)
    if not metrics.feasible:
        return None, metrics.reason or "infeasible"
    return cap.rps_per_gpu, "" if cap.at_sla else "no load meets the SLA"


def knob_sensitivity(
    config: EngineConfig, ctx: Context, space: SearchSpace, mode: LoadMode = "rate"
) -> list[KnobEffect]:
    """Capacity of `config` with each searched knob alone at each of its other space values."""
    # Refinement (tuner.run.refine) and the run folder ask for the same pick's neighbours: a
    # pure function of its inputs, so the second ask is the first's answer.
    key = (config.model_dump_json(), ctx.model_dump_json(), space.model_dump_json(), mode)
    if key not in _RECENT:
        _RECENT[key] = _sensitivity(config, ctx, space, mode)
        while len(_RECENT) > _RECENT_SIZE:
            _RECENT.pop(next(iter(_RECENT)))
    return [e.model_copy() for e in _RECENT[key]]


# The last few answers of knob_sensitivity, by its inputs serialised (oldest first).
_RECENT: dict[tuple[str, str, str, str], list[KnobEffect]] = {}
_RECENT_SIZE = 4


def _sensitivity(
    config: EngineConfig, ctx: Context, space: SearchSpace, mode: LoadMode
) -> list[KnobEffect]:
    base, _ = _capacity(config, ctx, mode)
    sampling = sampling_space(space, ctx)
    current = config.model_dump()
    effects = []
    for knob in searched():
        spec = sampling.get(knob.name)
        if spec is None or (knob.needs and not current.get(knob.needs)):
            continue  # a knob whose switch is off (speculative tokens without a draft)
        tried: set[str] = set()
        for value in grid_values(spec):
            if _label(value) in tried or _label(value) == _label(current[knob.name]):
                continue
            tried.add(_label(value))
            moved = config_from_params({**current, knob.name: value})
            if moved == config:
                continue  # the same variant (a draft with zero speculative tokens)
            if isinstance(moved, str):
                rps, reason = None, moved
            else:
                rps, reason = _capacity(moved, ctx, mode)
            effects.append(
                KnobEffect(
                    knob=knob.name,
                    base_value=current[knob.name],
                    value=value,
                    capacity_rps_per_gpu=rps,
                    base_capacity_rps_per_gpu=base or 0.0,
                    reason=reason or None,
                )
            )
    return effects


def top_effects(effects: list[KnobEffect], n: int = 3) -> list[KnobEffect]:
    """The `n` knobs worth most: per knob, its best other value (a gain means the recommended
    value is not that knob's best; a loss is what the recommended value is worth), by size."""
    best: dict[str, KnobEffect] = {}
    for e in effects:
        pct = e.change_pct
        if pct is None:
            continue
        held = best.get(e.knob)
        if held is None or pct > (held.change_pct or 0.0):
            best[e.knob] = e
    return sorted(best.values(), key=lambda e: -abs(e.change_pct or 0.0))[:n]


def write_sensitivity_csv(effects: list[KnobEffect], path: Path) -> None:
    """sensitivity.csv: one row per (knob, other value), largest change first."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(SENSITIVITY_COLUMNS)
    for e in sorted(effects, key=lambda e: (e.change_pct is None, -abs(e.change_pct or 0.0))):
        pct = e.change_pct
        writer.writerow(
            [
                e.knob,
                _label(e.base_value),
                _label(e.value),
                "" if e.capacity_rps_per_gpu is None else f"{e.capacity_rps_per_gpu:.4g}",
                f"{e.base_capacity_rps_per_gpu:.4g}",
                "" if pct is None else f"{pct:.1f}",
                e.reason or "",
            ]
        )
    write_atomic(path, buf.getvalue())
