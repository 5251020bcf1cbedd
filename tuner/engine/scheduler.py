"""Continuous-batching scheduler (vLLM V1 style): one token budget per step shared by decodes
and prefill chunks, at most `max_num_seqs` running sequences, KV blocks allocated on demand,
recompute preemption (newest first) when blocks run out. Pure Python: no torch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tuner.engine.kv_cache import BlockAllocator

__all__ = ["Scheduler", "Sequence", "blocks_needed"]


@dataclass
class Sequence:
    """One request: its tokens (prompt then generated), KV blocks and progress."""

    seq_id: int
    tokens: list[int]
    prompt_len: int
    max_new_tokens: int
    blocks: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose K/V are in the cache
    draft_computed: int = 0  # the same for the draft model's cache (speculative decoding)
    stop_token_ids: frozenset[int] = frozenset()  # generating one of these ends the request
    stopped: bool = False  # a stop token was generated

    @property
    def num_generated(self) -> int:
        """Output tokens so far."""
        return len(self.tokens) - self.prompt_len

    @property
    def finished(self) -> bool:
        """True once max_new_tokens were produced or a stop token was."""
        return self.stopped or self.num_generated >= self.max_new_tokens

    @property
    def in_prefill(self) -> bool:
        """True while more than the last token still needs computing."""
        return len(self.tokens) - self.num_computed > 1


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks holding num_tokens tokens."""
    return -(-num_tokens // block_size)


class Scheduler:
    """Chooses, each step, how many tokens of which sequences to run."""

    def __init__(
        self,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        allocator: BlockAllocator,
        block_size: int,
        enable_chunked_prefill: bool = True,
        decode_tokens: int = 1,
    ) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.allocator, self.block_size = allocator, block_size
        self.chunked = enable_chunked_prefill
        self.decode_tokens = decode_tokens  # 1 + speculative tokens verified per decode step
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Queue a new request."""
        self.waiting.append(seq)

    def finish(self, seq: Sequence) -> None:
        """Release a finished sequence's blocks."""
        self.running.remove(seq)
        self.allocator.free(seq.blocks)
        seq.blocks = []

    def _grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Allocate blocks for num_tokens more tokens (+ speculative lookahead); False if full."""
        # A decode step's tokens already include the speculative ones; only a prefill chunk
        # reserves them ahead, so the first verify after the prompt rarely has to preempt.
        decoding = len(seq.tokens) - seq.num_computed == 1
        lookahead = 0 if decoding else self.decode_tokens - 1
        need = blocks_needed(seq.num_computed + num_tokens + lookahead, self.block_size)
        extra = need - len(seq.blocks)
        if extra <= 0:
            return True
        if extra > self.allocator.num_free:
            return False
        seq.blocks += self.allocator.allocate(extra)
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.allocator.free(seq.blocks)
        seq.blocks, seq.num_computed, seq.draft_computed = [], 0, 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def _tokens_for(self, seq: Sequence, budget: int) -> int:
        remaining = len(seq.tokens) - seq.num_computed
        if remaining == 1:  # decode: the last sampled token plus any speculative ones
            return self.decode_tokens if budget >= self.decode_tokens else 0
        if not self.chunked and remaining <= self.max_num_batched_tokens:
            return remaining if remaining <= budget else 0
        # Chunked prefill, or a preempted sequence whose prompt + output outgrew the budget.
        return min(remaining, budget)

    def schedule(self) -> list[tuple[Sequence, int]]:
        """This step's (sequence, tokens to run) list: decodes first, then prefill chunks."""
        budget = self.max_num_batched_tokens
        plan: list[tuple[Sequence, int]] = []
        ordered = sorted(self.running, key=lambda s: s.in_prefill)  # stable: decodes first
        for seq in ordered:
            if seq not in self.running:
                continue  # preempted below to make room for an older sequence
            n = self._tokens_for(seq, budget)
            if n == 0:
                continue
            while not self._grow(seq, n):
                victim = self.running[-1]  # newest first, as vLLM's recompute preemption
                self._preempt(victim)
                planned = [(s, k) for s, k in plan if s is victim]
                if planned:
                    plan.remove(planned[0])
                    budget += planned[0][1]
                if victim is seq:
                    break
            if seq in self.running:
                plan.append((seq, n))
                budget -= n
        while self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            n = self._tokens_for(seq, budget)
            if n == 0 or not self._grow(seq, n):
                break
            self.waiting.popleft()
            self.running.append(seq)
            plan.append((seq, n))
            budget -= n
        return plan
