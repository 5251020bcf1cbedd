"""Re-screen from measurements (issue 34, item 2): after a round of measurements the simulator is
refitted to them and the screen re-ranked, which moves the next picks toward the true optimum;
the loop stops when a round does not improve the measured best, or on its budget.

The fake engine is the simulator itself on a hidden device profile (a 30 ms step overhead, as a
CPU build has) while the screen predicts with the datasheet profile: the screen ranks n-gram
speculation with 2-3 tokens first, but on the hidden engine every step costs so much that 4
tokens a step serve more. Only a refit to what was measured can find that out.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest

from tuner.backends import evaluate_capacity
from tuner.backends.base import CheckedBackend
from tuner.backends.sim import SimBackend
from tuner.calibration_schema import Calibration, CalibrationGrid
from tuner.errors import InterruptedRunError
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.run_spec import build_run_spec
from tuner.screen.candidates import Twins, pick_candidates
from tuner.screen.options import ScreenOptions, screen_spec
from tuner.screen.rounds import predicted_twins, rerank
from tuner.screen.run import ScreenedOutcome, screened_tune
from tuner.screen.variant import config_key
from tuner.search.trials import TrialRecord
from tuner.specs import Context, EngineConfig, Metrics

SPEC = build_run_spec(
    model="llama-tiny-20m",
    gpu="h100-sxm",
    backend="torch",
    num_gpus=1,
    ttft_ms=3000,
    tpot_ms=60,
    trials=60,
    workload_fields={
        "input_tokens": 128,
        "output_tokens": 64,
        "num_requests": 20,
        "ngram_acceptance_rate": 0.7,
    },
    knob_flags={
        "quantization": "bf16,fp16,fp8,int8,int8-wo",
        "kv_dtype": "auto,fp8",
        "draft_model": "none,ngram",
        "num_speculative_tokens": "0,1,2,3,4",
        "max_num_seqs": "32,128",
        "max_num_batched_tokens": "2048,8192",
        "tensor_parallel_size": "1",
        "enable_prefix_caching": "false",
    },
)
_HIDDEN = Calibration(
    backend="torch",
    model="llama-tiny-20m",
    measured_at="2026-01-01T00:00:00+00:00",
    host="the fake engine",
    efficiency={"step_overhead_s": 0.03},
    residuals={},
    grid=CalibrationGrid(batch=(1, 4), context=(32, 512), chunk=(32, 512)),
)
HIDDEN = SPEC.gpu.model_copy(update={"calibration": _HIDDEN})


class HiddenEngine(CheckedBackend):
    """'Measures' with the simulator on the hidden profile; records what it measured."""

    name = "torch"

    def __init__(self, seconds_per_variant: float = 0.0, stop_at: int | None = None) -> None:
        self.measured: list[EngineConfig] = []
        self.seconds_per_variant = seconds_per_variant
        self.stop_at = stop_at  # Ctrl-C when asked for this many measurements

    def _hidden(self, ctx: Context) -> Context:
        return ctx.model_copy(update={"gpu": HIDDEN})

    def _evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        measured = SimBackend().evaluate(config, self._hidden(ctx))
        return measured.model_copy(update={"backend": "torch"})

    def _capacity(
        self, config: EngineConfig, ctx: Context, mode: LoadMode, budget: ProbeBudget | None
    ) -> tuple[Capacity, Metrics]:
        if self.stop_at is not None and len(self.measured) == self.stop_at:
            raise KeyboardInterrupt
        self.measured.append(config)
        time.sleep(self.seconds_per_variant)
        cap, metrics = true_capacity(config, self._hidden(ctx), mode)
        return cap, metrics.model_copy(update={"backend": "torch"})


def true_capacity(
    config: EngineConfig, ctx: Context, mode: LoadMode = "rate"
) -> tuple[Capacity, Metrics]:
    """The hidden engine's capacity of `config` (the simulator's, on the hidden profile)."""
    budget = screen_spec(SPEC).probe_budget
    hidden = ctx.model_copy(update={"gpu": HIDDEN})
    return evaluate_capacity(SimBackend(), config, hidden, mode=mode, budget=budget)


def _true(config: EngineConfig) -> float:
    return true_capacity(config, SPEC.context())[0].tok_s_per_gpu


def _tune(tmp_path: Path, engine: HiddenEngine, **options: object) -> ScreenedOutcome:
    return screened_tune(
        SPEC,
        tmp_path / "run",
        ScreenOptions(**options),
        backend=engine,
        fresh=True,  # type: ignore[arg-type]
    )


def test_a_refitted_rescreen_moves_the_picks_toward_the_true_optimum(tmp_path: Path) -> None:
    engine = HiddenEngine()
    outcome = _tune(tmp_path, engine, confirm=2, rounds=4)
    by_round: dict[int, list[float]] = {}
    for v in outcome.variants[1:]:
        assert v.status == "measured" and v.measured is not None
        # The fake measured what the hidden profile says: the ground truth of this test.
        assert v.measured.capacity_tok_s_per_gpu == pytest.approx(_true(v.config))
        by_round.setdefault(v.round, []).append(v.measured.capacity_tok_s_per_gpu)
    first, second = by_round[1], by_round[2]
    # The screen's own picks are wrong on this engine; after one refit the picks are better,
    # and the second round holds the true optimum of the space the screen explored.
    optimum = max(_true(r.config) for r in outcome.screen.records if r.config is not None)
    assert max(first) < 0.95 * optimum
    assert max(second) > max(first) and sum(second) / 2 > sum(first) / 2
    assert max(second) == pytest.approx(optimum)
    # Not merely the next of the screen's own ranks: those (the quantized twins of its first
    # picks, to the screen) are no better than what was measured.
    measured = [v for v in outcome.variants if v.round == 1]
    unrefitted, _ = pick_candidates(
        outcome.screen.records,
        SPEC,
        engine,
        2,
        outcome.baseline.config,
        exclude=[v.config for v in measured],
        twins=predicted_twins(measured, SPEC),
    )
    assert max(_true(v.config) for v in unrefitted) <= max(first) < max(second)
    # The recommendation is the measured optimum, a variant the first screen did not pick.
    assert outcome.recommended is not None and outcome.recommended.round == 2
    assert outcome.recommended.measured is not None
    assert outcome.recommended.measured.capacity_tok_s_per_gpu == pytest.approx(optimum)
    # Round 3 found nothing better: the loop stopped there, before its 4-round budget.
    assert sorted(by_round) == [1, 2, 3] and len(engine.measured) == 1 + 3 * 2
    assert outcome.rounds[-1] == "stopped after round 3: it did not improve the measured best"
    # Variants that only differ in a knob that cannot bind (max_num_seqs above the 20 requests
    # sent) are predicted the same: one is measured, the others are skipped and said so.
    assert any("skipped as predicted twins: trial " in line for line in outcome.rounds)
    assert outcome.rounds[0].startswith("round 2: refitted to 3 measurements (TTFT P50 ")
    assert len({config_key(c) for c in engine.measured}) == len(engine.measured)  # none twice
    with (tmp_path / "run" / "confirm.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["round"] for r in rows] == ["1", "1", "1", "2", "2", "3", "3"]
    page = (tmp_path / "run" / "report.html").read_text()
    assert "stopped after round 3" in page


def test_the_loop_stops_when_the_rounds_budget_is_spent(tmp_path: Path) -> None:
    engine = HiddenEngine()
    outcome = _tune(tmp_path, engine, confirm=1, rounds=2)
    assert len(engine.measured) == 1 + 1 + 1  # the defaults, one per round
    assert [v.round for v in outcome.variants[1:]] == [1, 2]
    assert outcome.rounds[-1] == "stopped after round 2: the --rounds budget (2) was spent"


def test_the_loop_stops_when_the_time_budget_is_spent(tmp_path: Path) -> None:
    engine = HiddenEngine(seconds_per_variant=0.3)
    outcome = _tune(tmp_path, engine, confirm=2, rounds=5, confirm_seconds=0.5)
    # The defaults (0.3 s) and rank 1 start within the budget; rank 2 is skipped; no round 2.
    assert len(engine.measured) == 2
    assert [v.status for v in outcome.variants] == ["measured", "measured", "skipped"]
    assert outcome.rounds[-1] == (
        "stopped after round 1: the --confirm-seconds budget (0.5 s) was spent"
    )


def test_a_resumed_loop_remeasures_nothing_and_picks_the_same(tmp_path: Path) -> None:
    whole = HiddenEngine()
    done = _tune(tmp_path / "a", whole, confirm=2, rounds=2)
    cut = HiddenEngine(stop_at=4)  # Ctrl-C in round 2, after its first measurement
    run, options = tmp_path / "b" / "run", ScreenOptions(confirm=2, rounds=2)
    with pytest.raises(InterruptedRunError):
        screened_tune(SPEC, run, options, backend=cut, fresh=True)
    rest = HiddenEngine()
    resumed = screened_tune(SPEC, run, options, backend=rest, resume=True)
    # The refit of the journal's measurements picks round 2 again: only what is missing runs.
    assert cut.measured + rest.measured == whole.measured
    assert [v.label for v in resumed.variants] == [v.label for v in done.variants]


def test_variants_the_simulator_predicts_the_same_count_as_one() -> None:
    # Four sequences of 128 prompt tokens never fill a 2048-token batch: the budget cannot bind.
    configs = [
        EngineConfig(max_num_seqs=4, max_num_batched_tokens=2048),
        EngineConfig(max_num_seqs=4, max_num_batched_tokens=8192),
        EngineConfig(max_num_seqs=2, max_num_batched_tokens=2048),
    ]
    records = rerank(
        [
            TrialRecord(number=n, state="complete", params={}, config=c)
            for n, c in enumerate(configs)
        ],
        SPEC,
    )
    twins = Twins(SPEC.sla.percentile)
    picks, passed = pick_candidates(
        records, SPEC, HiddenEngine(), 2, EngineConfig(max_num_seqs=1), twins=twins
    )
    assert [p.config for p in picks] == [configs[0], configs[2]] and not passed
    assert twins.skipped == ["trial 1 (rank 2) as rank 1"]
    assert twins.twin_of(records[1].capacity) == "rank 1"
