"""Speculative decoding: greedy equals plain greedy exactly; rejection sampling keeps p."""

from __future__ import annotations

import pytest
import torch
from _engine_fixtures import prompts, tiny_model

from tuner.engine.generate import Engine, EngineLimits, run_to_completion
from tuner.engine.quantize import quantize_model
from tuner.engine.speculative import greedy_accept, ngram_propose, rejection_accept


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("draft_kind", ["same-int8", "other-seed"])
def test_greedy_speculative_equals_plain_greedy(k: int, draft_kind: str) -> None:
    target = tiny_model(seed=0)
    if draft_kind == "same-int8":
        draft = tiny_model(seed=0)
        quantize_model(draft, "int8-wo")
    else:
        draft = tiny_model(seed=7)
    ps = prompts([9, 31, 4])
    limits = EngineLimits(max_num_seqs=2, max_num_batched_tokens=24)
    plain = run_to_completion(Engine(target, limits), ps, 14)
    engine = Engine(target, limits, draft=draft, num_speculative_tokens=k)
    assert run_to_completion(engine, ps, 14) == plain
    assert engine.proposed_tokens > 0
    if draft_kind == "same-int8":
        assert engine.acceptance_rate > 0.3  # a quantized copy mostly agrees with the target
    else:
        assert engine.acceptance_rate < 0.5  # an unrelated model mostly does not


def test_ngram_proposals_follow_the_latest_match() -> None:
    assert ngram_propose([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 2) == [7, 1]  # suffix 1,2,3 seen at 4
    assert ngram_propose([5, 6, 7], 3) == []
    assert ngram_propose([4, 8, 4], 5) == [8, 4]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_ngram_speculation_runs_and_greedy_is_exact(temperature: float) -> None:
    target = tiny_model(seed=0)
    # Repetitive prompts give prompt-lookup something to match.
    ps = [[3, 4, 5, 6] * 6, [9, 8, 7] * 5]
    limits = EngineLimits(max_num_seqs=2)
    engine = Engine(
        target, limits, ngram_draft=True, num_speculative_tokens=3, temperature=temperature, seed=1
    )
    out = run_to_completion(engine, ps, 12)
    assert [len(o) for o in out] == [12, 12]
    assert engine.proposed_tokens > 0
    if temperature == 0:
        assert out == run_to_completion(Engine(target, limits), ps, 12)


def test_greedy_accept_rule() -> None:
    logits = torch.full((4, 10), -1.0)
    logits[0, 3] = logits[1, 5] = logits[2, 2] = logits[3, 8] = 1.0
    assert greedy_accept(logits, [3, 5, 2]) == [3, 5, 2, 8]  # all accepted + bonus
    assert greedy_accept(logits, [3, 6, 2]) == [3, 5]  # first mismatch replaced, then stop
    assert greedy_accept(logits, [0, 5, 2]) == [3]


def test_rejection_sampling_preserves_target_distribution() -> None:
    """Empirical law of every emitted position equals the target's p (total variation)."""
    g = torch.Generator().manual_seed(1234)
    vocab, k, trials = 6, 2, 30_000
    p = torch.softmax(torch.randn(k + 1, vocab, generator=g) * 1.5, -1)  # [k+1, V]
    q = torch.softmax(torch.randn(k, vocab, generator=g) * 1.5, -1)  # [k, V] a different draft
    counts = torch.zeros(vocab)
    second = torch.zeros(vocab)
    n_second = 0
    for _ in range(trials):
        draft = torch.multinomial(q, 1, generator=g)[:, 0].tolist()
        out = rejection_accept(p, q, draft, g)
        counts[out[0]] += 1
        if len(out) > 1:  # second token, conditioned on the first draft being accepted
            second[out[1]] += 1
            n_second += 1
    tv_first = 0.5 * (counts / trials - p[0]).abs().sum()
    # Given x1 accepted, position 2 is again exactly p[1] (p does not depend on x1 here).
    tv_second = 0.5 * (second / n_second - p[1]).abs().sum()
    # 3 standard errors of a TV estimate with V=6 at these sample sizes is about 0.01-0.02.
    assert tv_first < 0.015
    assert tv_second < 0.025
    # The draft alone would be far off: the test can fail.
    assert 0.5 * (q[0] - p[0]).abs().sum() > 0.1


def test_sampled_speculative_engine_runs_and_measures_acceptance() -> None:
    target = tiny_model(seed=0)
    draft = tiny_model(seed=0)
    quantize_model(draft, "int8-wo")
    engine = Engine(
        target, EngineLimits(), draft=draft, num_speculative_tokens=3, temperature=0.8, seed=3
    )
    outs = run_to_completion(engine, prompts([12, 20]), 16)
    assert [len(o) for o in outs] == [16, 16]
    assert 0.0 < engine.acceptance_rate <= 1.0
