"""The top-K pick of a screened tune: the best distinct variants of the predicted front that
the measuring backend can run, skipping those the simulator predicts the same as a variant
already measured or picked (its `Twins`)."""

from __future__ import annotations

from collections.abc import Iterable

from tuner.backends import Backend
from tuner.perf.load import Capacity
from tuner.run_spec import RunSpec
from tuner.screen.variant import ConfirmedVariant, config_key
from tuner.search.frontier import ranked_by_capacity
from tuner.search.trials import TrialRecord
from tuner.specs import Context, EngineConfig
from tuner.validity import invalid_reason

__all__ = ["Twins", "pick_candidates"]

# Significant digits two predictions must share to be the same: the simulator is deterministic,
# so variants that run the same schedule (neither token budget binds, say) agree to the last bit.
_DIGITS = 6


class Twins:
    """Variants the simulator predicts the same (same capacity load, throughput and latencies
    there): the first of each kind is kept by label; measuring a second one tells nothing new."""

    def __init__(self, percentile: int) -> None:
        self.percentile = percentile
        self.first: dict[str, str] = {}
        self.skipped: list[str] = []

    def key(self, cap: Capacity) -> str | None:
        """The prediction that makes two variants twins (None: no load met the SLA)."""
        top = cap.at_sla
        if top is None:
            return None
        pct = self.percentile
        values = (
            top.load,
            top.requests_per_s_per_gpu,
            top.output_tokens_per_s_per_gpu,
            top.ttft_ms.p50,
            top.ttft_ms.at(pct),
            top.tpot_ms.p50,
            top.tpot_ms.at(pct),
        )
        return " ".join(f"{x:.{_DIGITS}g}" for x in values)

    def add(self, cap: Capacity | None, label: str) -> None:
        """Remember `label`'s prediction (the first of its kind keeps the label)."""
        key = self.key(cap) if cap is not None else None
        if key is not None:
            self.first.setdefault(key, label)

    def twin_of(self, cap: Capacity | None) -> str | None:
        """The label of an earlier variant predicted the same as `cap`, if any."""
        key = self.key(cap) if cap is not None else None
        return None if key is None else self.first.get(key)


def _refusal(backend: Backend, config: EngineConfig, ctx: Context) -> str | None:
    check = getattr(backend, "cannot_run", None)
    return check(config, ctx) if check is not None else invalid_reason(config, ctx)


def pick_candidates(
    records: list[TrialRecord],
    spec: RunSpec,
    backend: Backend,
    k: int,
    baseline: EngineConfig,
    *,
    exclude: Iterable[EngineConfig] = (),
    twins: Twins | None = None,
    round_number: int = 1,
) -> tuple[list[ConfirmedVariant], list[str]]:
    """The best `k` distinct predicted variants `backend` can run (the baseline's knobs and
    `exclude`'s are left out: they are measured anyway), and a line per front variant passed
    over because it cannot run. With `twins`, a variant predicted the same as one it holds is
    skipped too (a line in `twins.skipped`), and each pick is added to it."""
    ctx = spec.context()
    seen = {config_key(c) for c in (baseline, *exclude)}
    chosen, passed = list[ConfirmedVariant](), list[str]()
    for rank, r in enumerate(ranked_by_capacity(records, spec.sla), start=1):
        if len(chosen) == k:
            break
        assert r.config is not None
        if config_key(r.config) in seen:
            continue
        if why := _refusal(backend, r.config, ctx):
            passed.append(f"trial {r.number} (rank {rank}): {why}")
            continue
        if twins is not None and (same := twins.twin_of(r.capacity)):
            twins.skipped.append(f"trial {r.number} (rank {rank}) as {same}")
            continue
        seen.add(config_key(r.config))
        pick = ConfirmedVariant(
            role="candidate",
            predicted_rank=rank,
            screen_trial=r.number,
            config=r.config,
            round=round_number,
        )
        chosen.append(pick)
        if twins is not None:
            twins.add(r.capacity, pick.label)
    return chosen, passed
