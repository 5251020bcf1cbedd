"""The continuous-batching scheduler never exceeds its limits and always finishes its work."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.engine.kv_cache import BlockAllocator
from tuner.engine.scheduler import Scheduler, Sequence, blocks_needed

pytestmark = pytest.mark.unit


def _drive(sched: Scheduler, seqs: list[Sequence], max_steps: int) -> int:
    """Run the scheduler with a fake model that 'computes' what was planned; return steps."""
    for s in seqs:
        sched.add(s)
    steps = 0
    while (sched.waiting or sched.running) and steps < max_steps:
        plan = sched.schedule()
        steps += 1
        ids = [s.seq_id for s, _ in plan]
        assert len(ids) == len(set(ids))
        assert sum(n for _, n in plan) <= sched.max_num_batched_tokens
        assert len(sched.running) <= sched.max_num_seqs
        held = [b for s in sched.running for b in s.blocks]
        assert len(held) == len(set(held))  # no block owned twice
        assert len(held) + sched.allocator.num_free == sched.allocator.num_blocks
        for seq, n in plan:
            assert seq in sched.running and n >= 1
            decode = len(seq.tokens) - seq.num_computed == 1
            assert n == sched.decode_tokens if decode else n <= len(seq.tokens) - seq.num_computed
            # A decode's n already counts its speculative tokens; a prefill chunk reserves them.
            lookahead = 0 if decode else sched.decode_tokens - 1
            assert len(seq.blocks) >= blocks_needed(
                seq.num_computed + n + lookahead, sched.block_size
            )
            if decode:
                seq.num_computed += 1
                seq.tokens.append(0)
            else:
                seq.num_computed += n
                if seq.num_computed == len(seq.tokens):
                    seq.tokens.append(0)  # the chunk that completes the prompt samples a token
            if seq.finished:
                sched.finish(seq)
    return steps


@settings(max_examples=60, deadline=None)
@given(
    prompt_lens=st.lists(st.integers(1, 80), min_size=1, max_size=12),
    out_lens=st.lists(st.integers(1, 20), min_size=12, max_size=12),
    max_num_seqs=st.integers(1, 6),
    budget=st.integers(16, 64),
    block_size=st.sampled_from([4, 8, 16]),
    spare_blocks=st.integers(0, 30),
    chunked=st.booleans(),
    spec_tokens=st.integers(0, 3),
)
def test_scheduler_respects_limits_and_finishes(
    prompt_lens: list[int],
    out_lens: list[int],
    max_num_seqs: int,
    budget: int,
    block_size: int,
    spare_blocks: int,
    chunked: bool,
    spec_tokens: int,
) -> None:
    if not chunked:
        prompt_lens = [min(p, budget) for p in prompt_lens]  # else a prompt could never fit
    seqs = [Sequence(i, list(range(p)), p, out_lens[i]) for i, p in enumerate(prompt_lens)]
    # Enough blocks for the longest request alone, so progress is always possible.
    longest = max(p + o for p, o in zip(prompt_lens, out_lens, strict=False)) + spec_tokens
    num_blocks = blocks_needed(longest, block_size) + spare_blocks
    sched = Scheduler(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        allocator=BlockAllocator(num_blocks),
        block_size=block_size,
        enable_chunked_prefill=chunked,
        decode_tokens=1 + spec_tokens,
    )
    _drive(sched, seqs, max_steps=5000)
    assert not sched.waiting and not sched.running
    assert all(s.finished for s in seqs)
    assert sched.allocator.num_free == num_blocks


def test_decodes_and_prefill_chunks_share_a_step() -> None:
    sched = Scheduler(
        max_num_seqs=4, max_num_batched_tokens=20, allocator=BlockAllocator(64), block_size=8
    )
    first = Sequence(0, list(range(10)), 10, 5)
    sched.add(first)
    assert sched.schedule() == [(first, 10)]
    first.num_computed, first.tokens = 10, first.tokens + [1]
    second = Sequence(1, list(range(50)), 50, 5)
    sched.add(second)
    plan = sched.schedule()
    assert plan == [(first, 1), (second, 19)]  # one decode + a 19-token prefill chunk
