"""The top-K pick of a screened tune: the best distinct variants of the predicted front that
the measuring backend can run."""

from __future__ import annotations

from tuner.backends import Backend
from tuner.run_spec import RunSpec
from tuner.screen.variant import ConfirmedVariant, config_key
from tuner.search.frontier import ranked_by_capacity
from tuner.search.trials import TrialRecord
from tuner.specs import Context, EngineConfig
from tuner.validity import invalid_reason

__all__ = ["pick_candidates"]


def _refusal(backend: Backend, config: EngineConfig, ctx: Context) -> str | None:
    check = getattr(backend, "cannot_run", None)
    return check(config, ctx) if check is not None else invalid_reason(config, ctx)


def pick_candidates(
    records: list[TrialRecord], spec: RunSpec, backend: Backend, k: int, baseline: EngineConfig
) -> tuple[list[ConfirmedVariant], list[str]]:
    """The best `k` distinct predicted variants `backend` can run (the baseline's knobs excluded:
    it is measured anyway), and a line per front variant passed over because it cannot run."""
    ctx = spec.context()
    seen, chosen, passed = {config_key(baseline)}, list[ConfirmedVariant](), list[str]()
    for rank, r in enumerate(ranked_by_capacity(records, spec.sla), start=1):
        if len(chosen) == k:
            break
        assert r.config is not None
        if config_key(r.config) in seen:
            continue
        if why := _refusal(backend, r.config, ctx):
            passed.append(f"trial {r.number} (rank {rank}): {why}")
            continue
        seen.add(config_key(r.config))
        chosen.append(
            ConfirmedVariant(
                role="candidate", predicted_rank=rank, screen_trial=r.number, config=r.config
            )
        )
    return chosen, passed
