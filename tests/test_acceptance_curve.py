"""Speculative acceptance per draft position: the product formula, where the simulator takes its
acceptance from (stated > calibrated curve > default), and that the choice is stated."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tuner.calibration_schema import AcceptanceCurve, Calibration, CalibrationGrid
from tuner.catalog import load_gpu, load_model, load_sla
from tuner.cli.tune_summary import speculation_line
from tuner.metrics import Metrics
from tuner.perf.predict import predict_metrics
from tuner.perf.speculative import (
    acceptance_for,
    expected_tokens_from_curve,
    expected_tokens_per_step,
    measured_curve,
)
from tuner.search.trials import TrialRecord
from tuner.specs import Context, EngineConfig, GPUProfile, Workload

pytestmark = pytest.mark.unit

probability = st.floats(min_value=0.0, max_value=1.0)


@given(
    st.lists(probability, min_size=1, max_size=6), st.integers(0, 5), st.integers(1, 8), probability
)
def test_expected_tokens_grow_with_each_position(
    curve: list[float], at: int, k: int, raise_to: float
) -> None:
    i = at % len(curve)
    higher = [*curve[:i], max(curve[i], raise_to), *curve[i + 1 :]]
    base = expected_tokens_from_curve(curve, k)
    assert 1.0 <= base <= k + 1
    assert expected_tokens_from_curve(higher, k) >= base - 1e-12


@given(probability, st.integers(0, 8), st.integers(1, 4))
def test_a_constant_curve_is_the_iid_formula(a: float, k: int, length: int) -> None:
    # Positions past the curve's end reuse its last value, so any length gives the same.
    got = expected_tokens_from_curve([a] * length, k)
    assert got == pytest.approx(expected_tokens_per_step(a, k), rel=1e-9, abs=1e-12)


def test_curve_values() -> None:
    assert expected_tokens_from_curve([0.5, 0.2], 3) == pytest.approx(1 + 0.5 + 0.1 + 0.02)
    assert expected_tokens_from_curve([0.9], 0) == 1.0
    with pytest.raises(ValueError):
        expected_tokens_from_curve([], 2)


def _calibration(*curves: AcceptanceCurve) -> Calibration:
    return Calibration(
        backend="torch",
        model="smollm2-135m",
        measured_at="2026-12-03T09:00:00Z",
        host="test host",
        efficiency={},
        residuals={},
        grid=CalibrationGrid(batch=(1, 8), context=(16, 512), chunk=(16, 512)),
        acceptance=list(curves),
    )


def _curve(draft: str, per_position: list[float]) -> AcceptanceCurve:
    return AcceptanceCurve(
        draft=draft, per_position=per_position, prompts="test prompts", tokens_measured=100
    )


def _gpu(*curves: AcceptanceCurve) -> GPUProfile:
    return load_gpu("h100-sxm").model_copy(update={"calibration": _calibration(*curves)})


def test_curve_selection_by_draft_kind_and_name() -> None:
    ngram, named, other = _curve("ngram", [0.3]), _curve("a", [0.6]), _curve("b", [0.8])
    cal = _calibration(other, ngram, named)
    assert measured_curve("ngram", cal) is ngram
    assert measured_curve("a", cal) is named  # the draft measured wins
    assert measured_curve("c", cal) is other  # else any draft-model curve
    assert measured_curve("ngram", _calibration(named)) is None
    assert measured_curve("a", _calibration(ngram)) is None
    assert measured_curve("a", None) is None


def test_precedence_stated_then_measured_then_default() -> None:
    cal = _calibration(_curve("ngram", [0.62, 0.48]))
    stated = acceptance_for("ngram", Workload(ngram_acceptance_rate=0.3), cal)
    assert stated.per_token == 0.3 and stated.curve is None
    measured = acceptance_for("ngram", Workload(), cal)
    assert measured.curve is not None
    assert measured.text == (
        "acceptance measured on test prompts with draft ngram (per position 0.62, 0.48)"
    )
    default = acceptance_for("llama-3.2-1b", Workload(), cal)  # no draft-model curve
    assert default.per_token == 0.7 and default.curve is None
    assert "default, not measured; measure with `tuner acceptance`" in default.text


def _predict(gpu: GPUProfile, config: EngineConfig, **wl: object) -> tuple[float, float, str]:
    workload = Workload.model_validate(
        {"input_tokens": 512, "output_tokens": 128, "concurrency": 4, "num_requests": 40, **wl}
    )
    draft = load_model(config.draft_model) if config.draft_model not in (None, "ngram") else None
    ctx = Context(
        model=load_model("llama-3.1-8b"),
        gpu=gpu,
        sla=load_sla("chat"),
        workload=workload,
        draft=draft,
    )
    m = predict_metrics(config, ctx)
    assert m.feasible, m.reason
    return m.tpot_ms.p50, float(m.extra["tokens_per_step"]), str(m.extra["acceptance"])  # type: ignore[arg-type]


@pytest.mark.parametrize("draft", ["ngram", "llama-3.2-1b"])
def test_simulator_uses_the_calibrated_curve(draft: str) -> None:
    config = EngineConfig(num_speculative_tokens=4, draft_model=draft)
    name = "ngram" if draft == "ngram" else "some-draft"
    low_tpot, low_tps, low_text = _predict(_gpu(_curve(name, [0.5, 0.3])), config)
    high_tpot, high_tps, high_text = _predict(_gpu(_curve(name, [0.9, 0.8])), config)
    assert low_tps == pytest.approx(expected_tokens_from_curve([0.5, 0.3], 4))
    assert high_tps == pytest.approx(expected_tokens_from_curve([0.9, 0.8], 4))
    assert high_tpot < low_tpot  # higher measured acceptance predicts a faster variant
    assert "per position 0.90, 0.80" in high_text and "per position 0.50, 0.30" in low_text
    # A stated rate wins over the calibration.
    field = "ngram_acceptance_rate" if draft == "ngram" else "acceptance_rate"
    _, stated_tps, stated_text = _predict(_gpu(_curve(name, [0.9])), config, **{field: 0.2})
    assert stated_tps == pytest.approx(expected_tokens_per_step(0.2, 4))
    assert stated_text == "assumes acceptance 0.20 per token (given)"


def test_tune_summary_line_states_the_acceptance() -> None:
    spec = EngineConfig(num_speculative_tokens=4, draft_model="ngram")

    def line(config: EngineConfig, **extra: object) -> str | None:
        m = Metrics.infeasible("x", backend="sim")
        m.extra = dict(extra)  # type: ignore[arg-type]
        return speculation_line(
            TrialRecord(number=0, state="complete", params={}, config=config, metrics=m)
        )

    assert line(EngineConfig(), acceptance="a") is None  # no speculation, nothing to state
    assert line(spec, acceptance="assumes acceptance 0.40 per token") == (
        "speculation: assumes acceptance 0.40 per token"
    )
    assert line(spec, spec_acceptance_rate=0.25) == (
        "speculation: acceptance measured 0.25 per token"
    )
