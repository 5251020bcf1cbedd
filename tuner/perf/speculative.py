"""Speculative decoding: draft k proposals, verify k+1 positions per sequence in one target step.

With per-token acceptance probability a (i.i.d.), the tokens one verify step emits per
sequence are 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) (Leviathan et al., 2023, eq. 1).
The cost per step is k draft decode steps plus one target step over (k+1) tokens per sequence:
cheap while the target is memory-bound (small batch), a loss once the target GEMMs become
compute-bound (large batch), where the k rejected-position FLOPs are paid for nothing.

Measured acceptance is not i.i.d.: later draft positions are accepted less often (the draft
drifts from the target as it conditions on its own guesses). With a per-position curve a_i =
P(position i accepted | positions before it accepted), the expected tokens per step are
1 + sum_{i=1..k} prod_{j<=i} a_j; a constant curve a_i = a gives the formula above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from tuner.calibration_schema import AcceptanceCurve, Calibration
from tuner.metrics import Metrics
from tuner.perf.costs import StepCostModel
from tuner.specs import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_MTP_ACCEPTANCE,
    DEFAULT_NGRAM_ACCEPTANCE,
    MTP,
    NGRAM,
    EngineConfig,
    Workload,
    WorkloadKind,
)

__all__ = [
    "NGRAM",
    "AcceptanceChoice",
    "AcceptanceNote",
    "Speculation",
    "acceptance_for",
    "acceptance_note",
    "expected_tokens_from_curve",
    "expected_tokens_per_step",
    "measured_curve",
    "shipped_curve",
    "step_coeffs",
]


def expected_tokens_per_step(acceptance: float, num_spec_tokens: int) -> float:
    """Expected tokens emitted per sequence per verify step: (1 - a^(k+1)) / (1 - a)."""
    if num_spec_tokens <= 0:
        return 1.0
    if acceptance >= 1.0:
        return float(num_spec_tokens + 1)
    return (1.0 - acceptance ** (num_spec_tokens + 1)) / (1.0 - acceptance)


def expected_tokens_from_curve(per_position: Sequence[float], num_spec_tokens: int) -> float:
    """Expected tokens per verify step from conditional acceptance per draft position:
    1 + sum_i prod_{j<=i} a_j; positions past the curve's end reuse its last value."""
    if not per_position:
        raise ValueError("an acceptance curve needs at least one position")
    total, reach = 1.0, 1.0
    for i in range(num_spec_tokens):
        reach *= per_position[min(i, len(per_position) - 1)]
        total += reach
    return total


@dataclass(frozen=True)
class Speculation:
    """A speculative-decoding setup: k proposals from a draft model (or an n-gram lookup)."""

    num_spec_tokens: int
    acceptance: float
    draft: StepCostModel | None  # None: prompt-lookup n-gram proposer (no model)
    ngram_proposal_s: float = 0.0
    # Measured conditional acceptance per draft position; when set it replaces `acceptance`.
    per_position: tuple[float, ...] | None = None

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens each decoding sequence advances per step."""
        if self.per_position:
            return expected_tokens_from_curve(self.per_position, self.num_spec_tokens)
        return expected_tokens_per_step(self.acceptance, self.num_spec_tokens)

    @property
    def queries_per_seq(self) -> int:
        """Positions the target verifies per decoding sequence."""
        return self.num_spec_tokens + 1


def step_coeffs(
    target: StepCostModel,
    spec: Speculation | None,
    num_decode: int,
    prefill_tokens: int,
    prefill_logits: int,
) -> tuple[float, float]:
    """(seconds independent of context, seconds per decode-context token) of one step."""
    queries = spec.queries_per_seq if spec else 1
    tokens = num_decode * queries + prefill_tokens
    const = target.fixed_s + target.gemm_s(tokens, num_decode * queries + prefill_logits)
    per_ctx = target.decode_attn_s_per_ctx(queries) if num_decode else 0.0
    if spec and num_decode:
        if spec.draft is None:
            const += spec.ngram_proposal_s
        else:
            d = spec.draft
            k = spec.num_spec_tokens
            # k draft decode steps, the first also carrying the draft's share of new prompt tokens
            const += k * (d.fixed_s + d.gemm_s(num_decode, num_decode))
            const += d.gemm_s(prefill_tokens, 0) if prefill_tokens else 0.0
            per_ctx += k * d.decode_attn_s_per_ctx(1.0)
    return const, per_ctx


AcceptanceSource = Literal["stated", "calibration", "shipped", "default"]


@dataclass(frozen=True)
class AcceptanceChoice:
    """The acceptance a prediction uses, where it came from, and that in one sentence."""

    per_token: float  # i.i.d. acceptance (a measured curve's first position when measured)
    curve: AcceptanceCurve | None  # the measured curve used, if any
    text: str  # e.g. "assumes acceptance 0.70 per token (default, not measured; ...)"
    source: AcceptanceSource = "default"

    @property
    def measured(self) -> bool:
        """False when the acceptance is an assumption nobody measured (the built-in default)."""
        return self.source != "default"


def measured_curve(draft_model: str, calibration: Calibration | None) -> AcceptanceCurve | None:
    """The calibration's curve for this draft: the n-gram (or MTP) one for 'ngram' ('mtp'); for a
    draft model the curve measured with that name, else any draft-model curve (the kind, not the
    pair, matches)."""
    curves = calibration.acceptance if calibration else []
    if draft_model in (NGRAM, MTP):  # no other kind of draft stands in for these
        return next((c for c in curves if c.draft == draft_model), None)
    named = [c for c in curves if c.draft == draft_model]
    return next(iter(named or [c for c in curves if c.draft not in (NGRAM, MTP)]), None)


class ShippedCurve(BaseModel):
    """One acceptance curve the project measured and ships, with the workload kind it holds for."""

    model_config = ConfigDict(extra="forbid")

    kind: WorkloadKind
    curve: AcceptanceCurve
    source: str  # the command that measured it, and where


@cache
def _shipped() -> tuple[ShippedCurve, ...]:
    text = resources.files("tuner").joinpath("data", "acceptance_curves.yaml").read_text("utf-8")
    return tuple(ShippedCurve.model_validate(c) for c in yaml.safe_load(text)["curves"])


def shipped_curve(draft_model: str, kind: WorkloadKind | None) -> ShippedCurve | None:
    """The shipped measured curve for this kind of draft on this kind of workload, if any (only
    n-gram lookup is shipped: its acceptance depends on the prompts, not on a draft model)."""
    if kind is None or draft_model != NGRAM:
        return None
    return next((c for c in _shipped() if c.kind == kind and c.curve.draft == NGRAM), None)


def _curve_text(curve: AcceptanceCurve) -> str:
    shown = ", ".join(f"{a:.2f}" for a in curve.per_position)
    return f"acceptance measured on {curve.prompts} with draft {curve.draft} (per position {shown})"


def acceptance_for(
    draft_model: str,
    workload: Workload,
    calibration: Calibration | None,
    sla_kind: WorkloadKind | None = None,
) -> AcceptanceChoice:
    """Precedence: the workload's stated rate (--acceptance), then a measured curve of the GPU
    profile's calibration, then the shipped measured curve of the workload's kind (its own, else
    the SLA preset's), then the default (DEFAULT_ACCEPTANCE, DEFAULT_NGRAM_ACCEPTANCE, or for
    MTP the acceptance its authors report, DEFAULT_MTP_ACCEPTANCE)."""
    ngram = draft_model == NGRAM
    stated = workload.ngram_acceptance_rate if ngram else workload.acceptance_rate
    if stated is not None:
        text = f"assumes acceptance {stated:.2f} per token (given)"
        return AcceptanceChoice(stated, None, text, "stated")
    curve = measured_curve(draft_model, calibration)
    if curve is not None:
        text = _curve_text(curve)
        return AcceptanceChoice(curve.per_position[0], curve, text, "calibration")
    kind = workload.kind or sla_kind
    shipped = shipped_curve(draft_model, kind)
    if shipped is not None:
        c = shipped.curve
        shown = ", ".join(f"{a:.2f}" for a in c.per_position)
        text = f"acceptance of the shipped {kind} curve ({shipped.source}; per position {shown})"
        return AcceptanceChoice(c.per_position[0], c, text, "shipped")
    if draft_model == MTP:
        text = (
            f"assumes acceptance {DEFAULT_MTP_ACCEPTANCE:.2f} per token (DeepSeek-V3's reported "
            "second-token acceptance of its MTP module, not measured on these prompts)"
        )
        return AcceptanceChoice(DEFAULT_MTP_ACCEPTANCE, None, text)
    default = DEFAULT_NGRAM_ACCEPTANCE if ngram else DEFAULT_ACCEPTANCE
    text = (
        f"assumes acceptance {default:.2f} per token (default, not measured; measure with "
        "`tuner acceptance`)"
    )
    return AcceptanceChoice(default, None, text)


# Said where a speculating result rests on the built-in default, not on a measured acceptance.
_UNMEASURED = " (its gain rests on an unmeasured assumption)"


@dataclass(frozen=True)
class AcceptanceNote:
    """What a speculating result's acceptance rests on, decided once for every output."""

    text: str  # the acceptance sentence (the simulator's choice, or what a backend measured)
    measured: bool  # False: the built-in default, which nobody measured

    def line(self, head: str = "speculation") -> str:
        """'speculation: ...', flagged when the gain rests on an unmeasured assumption."""
        return f"{head}{'' if self.measured else _UNMEASURED}: {self.text}"


def acceptance_note(config: EngineConfig | None, metrics: Metrics | None) -> AcceptanceNote | None:
    """The note of a speculating variant's result (None when it does not speculate or says
    nothing): the simulator's acceptance choice, or the rate a measuring backend measured."""
    if config is None or metrics is None or not config.num_speculative_tokens:
        return None
    extra = metrics.extra
    if "acceptance" in extra:
        text = str(extra["acceptance"])
        # Records from before the flag existed said it in the sentence only.
        measured = extra.get("acceptance_measured", "not measured" not in text)
        return AcceptanceNote(text, bool(measured))
    if "spec_acceptance_rate" in extra:
        rate = float(extra["spec_acceptance_rate"])  # type: ignore[arg-type]
        return AcceptanceNote(f"acceptance measured {rate:.2f} per token", True)
    return None
