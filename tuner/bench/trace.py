"""The internal representation of a request trace: one row per request, in send order.

A trace file (`bench.trace_file`) and a synthetic session workload (`bench.sessions`) both
become a `Trace`: arrival times, prompt and output lengths, and the content of each prompt as
a list of block hash ids (Mooncake's `hash_ids`: equal ids mean equal tokens, and block j's id
stands for the whole prefix up to it, so a prompt's leading ids that were seen before are a
cacheable prefix). The ids are stored flat (one int64 array and offsets), so a trace of a
hundred thousand long prompts is a few arrays, not a hundred thousand Python lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MOONCAKE_BLOCK_TOKENS", "BlockHashes", "Trace"]

# Mooncake's traces hash the prompt in blocks of 512 tokens (FAST'25 paper, section 3; the
# `hash_ids` of `mooncake_trace.jsonl` in kvcache-ai/Mooncake, traces/).
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class BlockHashes:
    """Each request's prompt as block hash ids: `flat[offsets[i]:offsets[i+1]]`."""

    flat: np.ndarray  # int64, every request's ids one after another
    offsets: np.ndarray  # int64, count + 1
    block_tokens: int  # tokens per hashed block

    def of(self, i: int) -> list[int]:
        """The hash ids of request `i`'s prompt, first block first."""
        return self.flat[self.offsets[i] : self.offsets[i + 1]].tolist()  # type: ignore[no-any-return]

    def take(self, idx: np.ndarray) -> BlockHashes:
        """The ids of requests `idx`, in that order."""
        lengths = (self.offsets[1:] - self.offsets[:-1])[idx]
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        parts = [self.flat[self.offsets[i] : self.offsets[i + 1]] for i in idx.tolist()]
        flat = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
        return BlockHashes(flat, offsets, self.block_tokens)


@dataclass(frozen=True)
class Trace:
    """Requests with recorded send times (s from the first), lengths and prompt block ids."""

    arrival_s: np.ndarray  # float64, sorted, first = 0
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    blocks: BlockHashes | None  # None: the file said nothing about content (no reuse modelled)
    source: str  # the file, or `sessions:<preset>`, for messages

    @property
    def count(self) -> int:
        """Requests in the trace."""
        return int(self.input_tokens.shape[0])

    @property
    def duration_s(self) -> float:
        """Seconds from the first send to the last."""
        return float(self.arrival_s[-1]) if self.count else 0.0

    @property
    def native_rate_rps(self) -> float | None:
        """Requests per second at the recorded times (None when every request is sent at once)."""
        if self.count < 2 or self.duration_s <= 0:
            return None
        return (self.count - 1) / self.duration_s

    def mean_lengths(self) -> tuple[int, int]:
        """Mean (input, output) tokens, rounded, at least 1."""
        return (
            max(1, round(float(self.input_tokens.mean()))),
            max(1, round(float(self.output_tokens.mean()))),
        )

    def arrivals_at(self, rate_rps: float | None) -> np.ndarray:
        """Send times replayed at `rate_rps` (the recorded times scaled by one speedup);
        None keeps the recorded times."""
        native = self.native_rate_rps
        if rate_rps is None or native is None:
            return self.arrival_s.copy()
        return self.arrival_s * (native / rate_rps)

    def speedup(self, rate_rps: float) -> float | None:
        """How much faster than recorded a replay at `rate_rps` sends (None: no recorded rate)."""
        native = self.native_rate_rps
        return None if native is None else rate_rps / native
