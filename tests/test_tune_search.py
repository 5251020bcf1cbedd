"""Search-loop mechanics with a closed-form fake backend: pruning, dedup, constraints, samplers."""

from __future__ import annotations

import optuna
import pytest

from tests._fake_backend import FakeBackend
from tuner import catalog
from tuner.errors import InputError
from tuner.search import study as search
from tuner.search.trials import TrialRecord
from tuner.specs import Context, SearchSpace, Workload

pytestmark = pytest.mark.unit

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _ctx(gpu: str = "h200-sxm", num_gpus: int = 2) -> Context:
    model = catalog.load_model("llama-3.1-8b")
    sla = catalog.load_sla("chat")
    return Context(
        model=model, gpu=catalog.load_gpu(gpu), sla=sla, workload=Workload(), num_gpus=num_gpus
    )


SPACE = SearchSpace(
    quantization=["bf16", "fp8", "int4-awq"],
    kv_dtype=["auto", "fp8"],
    max_num_batched_tokens=[2048, 8192],
    max_num_seqs=[8, 64, 256],
    tensor_parallel_size=[1, 2, 4],
    num_speculative_tokens=[0, 3],
    draft_model=[None, "ngram"],
)


def _run(sampler: str, trials: int, ctx: Context) -> tuple[list[TrialRecord], FakeBackend]:
    backend = FakeBackend()
    sampler = search.make_sampler(sampler, seed=1, space=SPACE, ctx=ctx)
    study = search.create_study(None, "t", ctx.sla, sampler)
    search.optimize(study, search.Evaluator(backend, ctx, SPACE), trials=trials)
    return search.records(study), backend


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random", "grid"])
def test_every_sampler_finishes_the_budget(sampler: str) -> None:
    records, _ = _run(sampler, 30, _ctx())
    assert len(records) == 30
    assert {r.state for r in records} <= {"complete", "pruned"}


def test_conditional_sampling_spends_every_trial_on_a_runnable_variant() -> None:
    # A100 has no FP8 math and only 2 GPUs are given: the sampler never proposes fp8, TP 4 or
    # speculative tokens without a draft, so every trial is an evaluation (none pruned).
    records, backend = _run("random", 60, _ctx(gpu="a100-80gb-sxm", num_gpus=2))
    assert [r.state for r in records] == ["complete"] * 60
    configs = [r.config for r in records if r.config]
    assert len(configs) == 60
    assert all(c.tensor_parallel_size <= 2 for c in configs)
    assert all(c.quantization.value != "fp8" and c.kv_dtype.value != "fp8" for c in configs)
    assert all(bool(c.draft_model) == bool(c.num_speculative_tokens) for c in configs)
    assert {bool(c.draft_model) for c in configs} == {True, False}
    assert backend.calls == len({c.key() for c in configs})


def test_cross_knob_rules_still_prune_with_the_rule_message() -> None:
    space = SPACE.model_copy(update={"max_num_batched_tokens": [64], "max_num_seqs": [256]})
    backend, ctx = FakeBackend(), _ctx()
    sampler = search.make_sampler("random", seed=0, space=space, ctx=ctx)
    study = search.create_study(None, "p", ctx.sla, sampler)
    search.optimize(study, search.Evaluator(backend, ctx, space), trials=3)
    records = search.records(study)
    assert {r.state for r in records} == {"pruned"}
    assert all(r.reason == "max_num_batched_tokens=64 < max_num_seqs=256" for r in records)
    assert backend.calls == 0


def test_a_space_with_no_runnable_value_is_one_input_error() -> None:
    space = SPACE.model_copy(update={"quantization": ["fp8"]})
    with pytest.raises(InputError, match="no quantization value can run here.*FP8 tensor cores"):
        search.sampling_space(space, _ctx(gpu="a100-80gb-sxm"))


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
    sampler = search.make_sampler("random", seed=3, space=SPACE, ctx=ctx)
    study = search.create_study(None, "c", ctx.sla, sampler)
    search.optimize(study, search.Evaluator(backend, ctx, SPACE), trials=40)
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        rec = search.record_from_frozen(t)
        feasible = all(v <= 0 for v in t.constraints.values())
        assert feasible == rec.meets(ctx.sla)
        assert set(t.constraints) == {"runs", "ttft", "tpot"}
