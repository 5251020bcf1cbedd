"""Block hash ids of multi-turn sessions: each turn's prompt is the session so far + new input.

A session's token stream is append-only: turn k's prompt is every earlier prompt and answer
followed by the new input, and its answer is appended after it. So the prompt's leading blocks
are exactly the full blocks of the stream before it, and they keep their ids; blocks first
filled by this turn get fresh ids. A block that is only partly filled when a prompt ends gets
an id of its own that no later prompt repeats: engines cache full blocks only (vLLM hashes a
block once its `block_size` tokens are known, `vllm/v1/core/kv_cache_utils.py`), so the next
turn computes that block again. Optionally every session starts with the same `shared_tokens`
(a system prompt), whose full blocks carry the same ids in every session.
"""

from __future__ import annotations

__all__ = ["SessionBlocks"]


class SessionBlocks:
    """Assigns block ids turn by turn for any number of interleaved sessions."""

    def __init__(self, block_tokens: int, shared_tokens: int = 0) -> None:
        self.block_tokens = block_tokens
        self.shared_ids = list(range(shared_tokens // block_tokens))
        self.shared_tokens = shared_tokens
        self.next_id = len(self.shared_ids)
        # session -> (tokens in its stream, ids of the stream's full blocks)
        self.history: dict[str, tuple[int, list[int]]] = {}

    def _fresh(self, count: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return ids

    def turn(self, session: str, prompt: int, output: int) -> list[int]:
        """The ids of this turn's prompt blocks (the last one partial unless prompt divides)."""
        b = self.block_tokens
        tokens, full = self.history.get(session, (self.shared_tokens, list(self.shared_ids)))
        # The prompt repeats the stream so far (as far as it reaches), then adds new tokens.
        reused = full[: min(prompt, tokens) // b]
        prompt_full = prompt // b
        ids = reused + self._fresh(prompt_full - len(reused))
        stream_full = (prompt + output) // b
        # The answer's tokens (and the prompt's partial tail) fill new blocks of the stream.
        self.history[session] = (prompt + output, ids + self._fresh(stream_full - prompt_full))
        if prompt % b:
            ids = ids + self._fresh(1)  # partial: cached by no engine, never matched again
        return ids
