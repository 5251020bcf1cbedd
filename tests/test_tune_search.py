"""Search-loop mechanics with a closed-form fake backend: pruning, dedup, constraints, samplers."""

from __future__ import annotations

import optuna
import pytest

from tests._fake_backend import FakeBackend
from tuner import catalog
from tuner.search import study as search
from tuner.search.trials import TrialRecord
from tuner.specs import Context, SearchSpace, Workload

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _ctx(gpu: str = "h200-sxm", num_gpus: int = 2) -> Context:
    model = catalog.load_model("llama-3.1-8b")
    sla = catalog.load_sla("chat")
    return Context(model=model, gpu=catalog.load_gpu(gpu), sla=sla, workload=Workload(),
                   num_gpus=num_gpus)  # fmt: skip


SPACE = SearchSpace(
    quantization=["bf16", "fp8", "int4-awq"], kv_dtype=["auto", "fp8"],
    max_num_batched_tokens=[2048, 8192], max_num_seqs=[8, 64, 256],
    tensor_parallel_size=[1, 2, 4], num_speculative_tokens=[0, 3], draft_model=[None, "ngram"],
)  # fmt: skip


def _run(sampler: str, trials: int, ctx: Context) -> tuple[list[TrialRecord], FakeBackend]:
    backend = FakeBackend()
    study = search.create_study(None, "t", ctx.sla, search.make_sampler(sampler, seed=1,
                                                                        space=SPACE))  # fmt: skip
    search.optimize(study, search.Evaluator(backend, ctx, SPACE), trials=trials)
    return search.records(study), backend


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random", "grid"])
def test_every_sampler_finishes_the_budget(sampler: str) -> None:
    records, _ = _run(sampler, 30, _ctx())
    assert len(records) == 30
    assert {r.state for r in records} <= {"complete", "pruned"}


def test_invalid_combinations_are_pruned_with_reasons_before_evaluation() -> None:
    records, backend = _run("random", 60, _ctx(gpu="a100-80gb-sxm", num_gpus=2))
    pruned = [r for r in records if r.state == "pruned"]
    reasons = " | ".join(r.reason or "" for r in pruned)
    assert "without a draft model" in reasons
    assert "> 2 GPUs available" in reasons
    assert "FP8" in reasons  # A100 has no FP8 tensor cores
    assert all(r.metrics is None for r in pruned)
    evaluated = [r for r in records if r.evaluated]
    assert all(r.config.tensor_parallel_size <= 2 for r in evaluated if r.config)
    assert backend.calls == len({r.config.key() for r in evaluated if r.config})


def test_duplicates_are_evaluated_once_and_point_to_the_first() -> None:
    records, backend = _run("tpe", 80, _ctx())
    evaluated = [r for r in records if r.evaluated]
    dups = [r for r in evaluated if r.duplicate_of is not None]
    assert dups, "80 TPE trials over this small space should repeat a variant"
    first = {r.number: r for r in evaluated}
    for d in dups:
        assert first[d.duplicate_of].config == d.config
        assert first[d.duplicate_of].metrics == d.metrics
    assert backend.calls == len(evaluated) - len(dups)


def test_constraints_mark_sla_misses_and_oom_as_infeasible() -> None:
    backend = FakeBackend()
    ctx = _ctx()
    study = search.create_study(None, "c", ctx.sla, search.make_sampler("random", seed=3,
                                                                        space=SPACE))  # fmt: skip
    search.optimize(study, search.Evaluator(backend, ctx, SPACE), trials=40)
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        rec = search.record_from_frozen(t)
        feasible = all(v <= 0 for v in t.constraints.values())
        assert feasible == rec.meets(ctx.sla)
        assert set(t.constraints) == {"runs", "ttft", "tpot"}
