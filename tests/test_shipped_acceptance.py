"""Shipped measured acceptance curves: the default of a chat or code workload when no rate is
stated and no calibration holds a curve, named in the output, and able to turn a recommendation."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.catalog import load_gpu, load_model, load_sla
from tuner.cli import app
from tuner.perf.capacity import sim_capacity
from tuner.perf.speculative import acceptance_for, expected_tokens_from_curve, shipped_curve
from tuner.run.best_file import TunedBest, load_best
from tuner.specs import Context, EngineConfig, Workload


@pytest.mark.unit
def test_chat_and_code_ship_ngram_curves_and_code_copies_more() -> None:
    chat, code = shipped_curve("ngram", "chat"), shipped_curve("ngram", "code")
    assert chat is not None and code is not None
    assert "tuner acceptance --draft ngram --kind chat" in chat.source
    # Code completion copies its context: n-gram lookup is accepted more often than on chat.
    assert expected_tokens_from_curve(code.curve.per_position, 4) > expected_tokens_from_curve(
        chat.curve.per_position, 4
    )
    assert shipped_curve("ngram", None) is None and shipped_curve("ngram", "other") is None
    assert shipped_curve("llama-3.2-1b", "chat") is None  # a draft model's depends on the pair


@pytest.mark.unit
def test_precedence_stated_then_calibration_then_shipped_then_default() -> None:
    shipped = acceptance_for("ngram", Workload(), None, "chat")
    assert shipped.source == "shipped" and shipped.measured and shipped.curve is not None
    assert "shipped chat curve" in shipped.text and "tuner acceptance" in shipped.text
    own_kind = acceptance_for("ngram", Workload(kind="code"), None, "chat")
    assert "shipped code curve" in own_kind.text  # the workload's kind before the SLA's
    stated = acceptance_for("ngram", Workload(ngram_acceptance_rate=0.9), None, "chat")
    assert stated.source == "stated" and stated.per_token == 0.9
    unknown = acceptance_for("ngram", Workload(kind="other"), None, "chat")
    assert unknown.source == "default" and not unknown.measured
    assert "default, not measured" in unknown.text


def _capacity(k: int, sla: str, **wl: object) -> float:
    config = EngineConfig(num_speculative_tokens=k, draft_model="ngram" if k else None)
    ctx = Context(
        model=load_model("llama-3.1-8b"),
        gpu=load_gpu("h200-sxm"),
        sla=load_sla(sla),
        workload=Workload.model_validate(wl),
    )
    return sim_capacity(config, ctx, operating_point=False)[0].rps_per_gpu


@pytest.mark.unit
def test_the_shipped_chat_curve_makes_ngram_speculation_a_loss_a_stated_rate_a_gain() -> None:
    plain = _capacity(0, "chat")
    assert _capacity(4, "chat") < plain  # 1.10 tokens per verify step do not pay for k=4
    assert _capacity(4, "chat", ngram_acceptance_rate=0.9) > plain


def _space(tmp_path: Path) -> Path:
    path = tmp_path / "spec-only.yaml"
    path.write_text(
        "name: spec-only\nquantization: [fp8]\nkv_dtype: [fp8]\nmax_num_seqs: [256]\n"
        "max_num_batched_tokens: [8192]\ntensor_parallel_size: [1]\n"
        "num_speculative_tokens: [0, 4]\ndraft_model: [null, ngram]\n"
    )
    return path


def _recommended(tmp_path: Path, name: str, *extra: str) -> tuple[TunedBest, str]:
    run = tmp_path / name
    args = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]
    args += ["--space", str(_space(tmp_path)), "--trials", "6", "--run-dir", str(run), *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    best = load_best(run / "best.yaml")
    assert isinstance(best, TunedBest) and best.recommended is not None
    return best, result.output


def test_a_chat_tune_uses_the_shipped_curve_and_the_curve_turns_the_recommendation(
    tmp_path: Path,
) -> None:
    shipped, out = _recommended(tmp_path, "shipped")
    assert shipped.recommended is not None
    assert not shipped.recommended.config.num_speculative_tokens
    stated, out_stated = _recommended(tmp_path, "stated", "--ngram-acceptance", "0.9")
    assert stated.recommended is not None
    assert stated.recommended.config.num_speculative_tokens == 4
    assert "assumes acceptance 0.90 per token (given)" in out_stated
    report = (tmp_path / "shipped" / "report.html").read_text()
    assert "shipped chat curve" in report


def test_an_unmeasured_speculative_pick_is_flagged_in_the_summary_and_best_yaml(
    tmp_path: Path,
) -> None:
    # An "other" workload has no shipped curve: the pick rests on the built-in default.
    run = tmp_path / "other"
    space = tmp_path / "ngram-only.yaml"
    space.write_text(
        "name: ngram-only\nquantization: [fp8]\nkv_dtype: [fp8]\nmax_num_seqs: [256]\n"
        "max_num_batched_tokens: [8192]\ntensor_parallel_size: [1]\n"
        "num_speculative_tokens: [4]\ndraft_model: [ngram]\n"
    )
    sla = tmp_path / "other.yaml"
    sla.write_text("name: other\nttft_ms: 500\ntpot_ms: 50\nkind: other\n")
    args = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", str(sla)]
    args += ["--space", str(space), "--trials", "3", "--run-dir", str(run)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "its gain rests on an unmeasured assumption" in result.output
    best = load_best(run / "best.yaml")
    assert isinstance(best, TunedBest) and best.recommended is not None
    assert best.recommended.speculation_measured is False
    assert "default, not measured" in (best.recommended.speculation or "")
