"""Speculative decoding acceptance rules (Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding", Algorithm 1).

The draft proposes x_1..x_k with probabilities q_i(.); the target scores the k+1 positions in
one pass, giving p_1..p_{k+1}. Token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)).
At the first rejection we sample from the residual norm(max(p_i - q_i, 0)) and stop; if all k
are accepted we sample a bonus token from p_{k+1}. Every emitted token is then distributed exactly
as p: P(emit x) = q(x) min(1, p/q) + (1 - sum_y min(p(y), q(y))) * norm(max(p - q, 0))(x)
= min(p, q)(x) + max(p - q, 0)(x) = p(x). Greedy decoding is the temperature -> 0 limit: accept
while the draft token is the target's argmax, then emit the target's argmax.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["greedy_accept", "ngram_propose", "rejection_accept"]

NGRAM_MAX = 4  # longest suffix matched by prompt-lookup drafting (vLLM's default max is 4)
NGRAM_MIN = 1


def ngram_propose(
    tokens: list[int], k: int, max_n: int = NGRAM_MAX, min_n: int = NGRAM_MIN
) -> list[int]:
    """Prompt-lookup draft: find the latest earlier occurrence of the longest suffix (max_n down
    to min_n tokens) and propose up to k tokens that followed it; [] when nothing matches.

    As a draft distribution this is one-hot: q(x_i) = 1 for each proposed token.
    """
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k]
    return []


def greedy_accept(target_logits: Tensor, draft_tokens: list[int]) -> list[int]:
    """Emitted tokens: the accepted draft prefix plus the target's next argmax.

    target_logits: [k+1, V]; draft_tokens: k ids.
    """
    best = target_logits.argmax(-1).tolist()  # [k+1]
    out: list[int] = []
    for i, tok in enumerate(draft_tokens):
        if tok != best[i]:
            break
        out.append(tok)
    out.append(best[len(out)])
    return out


def rejection_accept(
    p: Tensor, q: Tensor, draft_tokens: list[int], generator: torch.Generator
) -> list[int]:
    """Emitted tokens under rejection sampling. p: [k+1, V] target probs, q: [k, V] draft probs."""
    out: list[int] = []
    u = torch.rand(len(draft_tokens), generator=generator, device=p.device)  # [k]
    for i, tok in enumerate(draft_tokens):
        if u[i] * q[i, tok] <= p[i, tok]:  # accept with probability min(1, p/q)
            out.append(tok)
            continue
        residual = (p[i] - q[i]).clamp(min=0)
        total = residual.sum()
        dist = residual / total if total > 0 else p[i]
        out.append(int(torch.multinomial(dist, 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(p[len(draft_tokens)], 1, generator=generator)))
    return out
