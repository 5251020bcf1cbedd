"""Speculative decoding: draft k proposals, verify k+1 positions per sequence in one target step.

With per-token acceptance probability a (i.i.d.), the tokens one verify step emits per
sequence are 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) (Leviathan et al., 2023, eq. 1).
The cost per step is k draft decode steps plus one target step over (k+1) tokens per sequence:
cheap while the target is memory-bound (small batch), a loss once the target GEMMs become
compute-bound (large batch), where the k rejected-position FLOPs are paid for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.perf.costs import StepCostModel

__all__ = ["Speculation", "expected_tokens_per_step", "step_coeffs"]


def expected_tokens_per_step(acceptance: float, num_spec_tokens: int) -> float:
    """Expected tokens emitted per sequence per verify step: (1 - a^(k+1)) / (1 - a)."""
    if num_spec_tokens <= 0:
        return 1.0
    if acceptance >= 1.0:
        return float(num_spec_tokens + 1)
    return (1.0 - acceptance ** (num_spec_tokens + 1)) / (1.0 - acceptance)


@dataclass(frozen=True)
class Speculation:
    """A speculative-decoding setup: k proposals from a draft model (or an n-gram lookup)."""

    num_spec_tokens: int
    acceptance: float
    draft: StepCostModel | None  # None: prompt-lookup n-gram proposer (no model)
    ngram_proposal_s: float = 0.0

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens each decoding sequence advances per step."""
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
