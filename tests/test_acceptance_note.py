"""What a speculating pick's acceptance rests on is decided once (tuner.perf.speculative.
acceptance_note) and worded alike by the tune summary, best.yaml and the report's answer card,
for a run folder written before `acceptance_measured` existed and for a measuring backend."""

from __future__ import annotations

import pytest

from tuner.answer.card import Explanations, answer_card
from tuner.cli.tune_summary import speculation_line
from tuner.perf.load import Capacity, LoadPoint
from tuner.perf.speculative import acceptance_note
from tuner.run.folder import best_file
from tuner.run_spec import build_run_spec
from tuner.search.pareto import analyze
from tuner.search.trials import TrialRecord
from tuner.specs import EngineConfig, Metrics, Percentiles

pytestmark = pytest.mark.unit

SPECULATING = EngineConfig(num_speculative_tokens=4, draft_model="ngram")
OLD_DEFAULT = (
    "assumes acceptance 0.70 per token (default, not measured; measure with `tuner acceptance`)"
)
FLAG = "(its gain rests on an unmeasured assumption)"


def _record(config: EngineConfig, **extra: object) -> TrialRecord:
    ttft, tpot = (Percentiles(mean=v, p50=v, p90=v, p95=v, p99=v) for v in (100.0, 10.0))
    m = Metrics(ttft_ms=ttft, tpot_ms=tpot, output_tokens_per_s_per_gpu=1000)
    m.extra = dict(extra)  # type: ignore[arg-type]
    point = LoadPoint(
        load=2.0,
        requests_per_s_per_gpu=2.0,
        output_tokens_per_s_per_gpu=1000,
        ttft_ms=ttft,
        tpot_ms=tpot,
        meets_sla=True,
        meets_headroom=True,
    )
    cap = Capacity(mode="rate", points=[point], probes=1)
    return TrialRecord(
        number=0, state="complete", params={}, config=config, metrics=m, capacity=cap
    )


def _three_wordings(rec: TrialRecord) -> tuple[str | None, dict[str, object], list[str]]:
    """The summary line, best.yaml's speculation fields and the answer card's lines."""
    spec = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm", sla="chat")
    best = best_file(spec, [rec], analyze([rec], spec.sla))
    assert best.recommended is not None
    fields = best.recommended.model_dump(include={"speculation", "speculation_measured"})
    card = answer_card(rec, 95, Explanations())
    return speculation_line(rec), fields, card.lines if card else []


@pytest.mark.parametrize(
    ("extra", "text", "measured"),
    [
        # written before the flag existed: the sentence says "not measured"
        ({"acceptance": OLD_DEFAULT}, OLD_DEFAULT, False),
        # the same run folder with a shipped curve: measured
        ({"acceptance": "acceptance of the shipped chat curve"}, None, True),
        # a measuring backend (torch, vLLM) reports the rate it measured
        ({"spec_acceptance_rate": 0.625}, "acceptance measured 0.62 per token", True),
        # the current simulator says it with the flag
        ({"acceptance": "x", "acceptance_measured": False}, "x", False),
    ],
)
def test_summary_best_yaml_and_report_word_one_decision(
    extra: dict[str, object], text: str | None, measured: bool
) -> None:
    rec = _record(SPECULATING, **extra)
    note = acceptance_note(rec.config, rec.metrics)
    assert note is not None and note.measured is measured
    text = text or str(extra["acceptance"])
    assert note.text == text
    line, fields, card = _three_wordings(rec)
    assert line == note.line() and (FLAG in line) is (not measured)
    assert fields == {"speculation": text, "speculation_measured": measured}
    assert note.line("Speculation") in card


def test_a_variant_that_does_not_speculate_has_no_note_anywhere() -> None:
    rec = _record(EngineConfig(), acceptance=OLD_DEFAULT, spec_acceptance_rate=0.5)
    assert acceptance_note(rec.config, rec.metrics) is None
    line, fields, card = _three_wordings(rec)
    assert line is None and not fields.get("speculation")
    assert not any(c.startswith("Speculation") for c in card)
