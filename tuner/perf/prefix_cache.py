"""A content-addressed KV prefix cache: blocks by hash id, reference counts, LRU eviction.

This is the policy of vLLM's automatic prefix caching (`vllm/v1/core/block_pool.py`,
`kv_cache_utils.py` FreeKVCacheBlockQueue, `single_type_kv_cache_manager.py`): a full block is
cached under the hash of its tokens and everything before it; a new prompt's leading blocks
already cached are hits and are not computed again; a block stays cached while any running
sequence references it, and once unreferenced it waits in a free queue where the least
recently used is evicted first when a new block needs the room (a sequence's blocks are freed
tail first, so its tail goes before its prefix). SGLang's radix cache (`sglang/srt/mem_cache/
radix_cache.py`: reference-counted tree nodes, LRU eviction of unreferenced leaves) evicts the
same blocks in the same order for prompts that are prefixes of one another, which is what a
trace's hash ids describe, so one model serves both engines here.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["PrefixCache"]


class PrefixCache:
    """Cached blocks: referenced ones (by running sequences) and an LRU of unreferenced ones."""

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}  # hash id -> running sequences holding the block
        self.free: OrderedDict[int, None] = OrderedDict()  # unreferenced, least recent first
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.refs) + len(self.free)

    def match(self, ids: list[int]) -> int:
        """How many leading blocks of `ids` are cached (the prompt's hits)."""
        refs, free = self.refs, self.free
        hits = 0
        for h in ids:
            if h not in refs and h not in free:
                break
            hits += 1
        return hits

    def acquire(self, ids: list[int]) -> None:
        """A running sequence holds these blocks: cached, and safe from eviction."""
        refs, free = self.refs, self.free
        for h in ids:
            if h in free:
                del free[h]
            refs[h] = refs.get(h, 0) + 1

    def release(self, ids: list[int]) -> None:
        """A sequence let go of these blocks; unreferenced ones join the LRU, tail first."""
        refs, free = self.refs, self.free
        for h in reversed(ids):
            left = refs.get(h, 0) - 1
            if left > 0:
                refs[h] = left
            elif h in refs:
                del refs[h]
                free[h] = None
                free.move_to_end(h)

    def trim(self, room_blocks: int) -> None:
        """Evict least recently used unreferenced blocks until at most `room_blocks` remain."""
        free = self.free
        while len(free) > max(0, room_blocks):
            free.popitem(last=False)
            self.evictions += 1
