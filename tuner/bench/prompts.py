"""Prompts for planned requests: token-id windows of a pool, or words of a small corpus.

Lengths come from `tuner.bench.arrivals`; this module only fills them with content. No HTTP
import, so the in-process engine replay (`tuner[engine]`) uses it without the load generator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from tuner.bench.arrivals import ArrivalPlan
from tuner.specs import Workload

__all__ = ["SALT_TOKENS", "PlannedRequest", "block_content", "corpus_words", "plan_requests"]

# Common English words: the corpus prompts are cut from (tokenizes to ~1 token per word).
_VOCABULARY = (
    "the of and to in is was for on that with as by at from his her it an are were which this "
    "be or has had not but one all their they new more also first after two who its been "
    "time would can year people other when into some out only city about over state could "
    "world made most many like three school through war then them between years under where "
    "music life house water small group long great right high place part number before while "
    "called found team well during work game back river early family since second south north "
    "east west film light book open public large power local along still"
)
_WORDS = _VOCABULARY.split()
# Tokens (or words) of a salted prompt's own part that come from its salt: with ~200 distinct
# corpus tokens, 200^4 openings make two salted prompts start alike about never.
SALT_TOKENS = 4


@dataclass(frozen=True)
class PlannedRequest:
    """One request to send: the prompt (token ids or text) and the lengths it was planned with."""

    prompt: list[int] | str
    input_tokens: int
    output_tokens: int


def corpus_words(n: int, seed: int) -> list[str]:
    """`n` seeded words of the corpus vocabulary."""
    rng = random.Random(seed)
    return [rng.choice(_WORDS) for _ in range(n)]


def plan_requests(
    workload: Workload,
    plan: ArrivalPlan,
    token_pool: list[int] | None,
    *,
    seed_offset: int = 0,
    salt: int | None = None,
) -> list[PlannedRequest]:
    """Prompts for the planned lengths; token-id prompts cut from `token_pool` if given.

    A shared prefix of `prefix_cache_hit` x input tokens (the pool's start) opens every prompt;
    the rest is a window at a random offset, so prompts differ after the prefix. A trace's
    requests (`plan.blocks`) get content from their block ids instead (`block_content`).
    `salt`: the first SALT_TOKENS of each prompt's own part come from it and the request's
    index, so no two requests of a run, nor of two runs with different salts, share more than
    the prefix the workload asks for.
    """
    rng = random.Random(workload.seed + seed_offset)
    if plan.blocks is not None:
        return _trace_requests(plan, token_pool, rng)
    planned = []
    lengths = zip(plan.input_tokens.tolist(), plan.output_tokens.tolist(), strict=True)
    for i, (isl, osl) in enumerate(lengths):
        shared = min(isl, round(workload.prefix_cache_hit * isl))
        if token_pool:
            start = rng.randrange(len(token_pool))
            body = [token_pool[(start + j) % len(token_pool)] for j in range(isl - shared)]
            _salt(body, token_pool, salt, i)
            planned.append(PlannedRequest(token_pool[:shared] + body, isl, osl))
        else:
            words = [rng.choice(_WORDS) for _ in range(isl - shared)]
            _salt(words, _WORDS, salt, i)
            text = " ".join(corpus_words(shared, workload.seed) + words)
            planned.append(PlannedRequest(text, isl, osl))
    return planned


def _salt(own: list[Any], choices: list[Any], salt: int | None, index: int) -> None:
    """Open a prompt's own part with tokens drawn from (salt, index), in place."""
    if salt is None:
        return
    rng = random.Random(f"{salt}:{index}")
    for j in range(min(SALT_TOKENS, len(own))):
        own[j] = rng.choice(choices)


def block_content(block_id: int, count: int, token_pool: list[int] | None) -> list[int] | list[str]:
    """The first `count` tokens (or words) of block `block_id`: the same for the same id.

    A trace's equal hash ids mean equal content (and, as each id stands for its whole prefix,
    equal prompts up to that block), so a measured server's prefix cache sees exactly the reuse
    the simulator replays. Token-id prompts match block by block; a word is about one token, so
    text prompts share the same prefixes up to the tokenizer's boundaries.
    """
    rng = random.Random(block_id)
    if token_pool:
        start = rng.randrange(len(token_pool))
        return [token_pool[(start + i) % len(token_pool)] for i in range(count)]
    return [rng.choice(_WORDS) for _ in range(count)]


def _trace_requests(
    plan: ArrivalPlan, token_pool: list[int] | None, rng: random.Random
) -> list[PlannedRequest]:
    """Prompts of a trace's requests, block by block from their hash ids."""
    assert plan.blocks is not None
    size = plan.blocks.block_tokens
    planned = []
    for i, (isl, osl) in enumerate(
        zip(plan.input_tokens.tolist(), plan.output_tokens.tolist(), strict=True)
    ):
        content: list[Any] = []
        for j, block_id in enumerate(plan.blocks.of(i)):
            content.extend(block_content(block_id, min(size, isl - j * size), token_pool))
        # Tokens past the last id (a trace may name fewer blocks): this request's own.
        content.extend(block_content(rng.getrandbits(62), isl - len(content), token_pool))
        prompt = content if token_pool else " ".join(content)
        planned.append(PlannedRequest(prompt, isl, osl))
    return planned
