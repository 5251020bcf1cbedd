"""The engine loop: scheduler -> one batched forward (decodes + prefill chunks) -> sampling,
optionally with a draft model proposing k tokens that the target verifies in the same pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from pydantic import BaseModel
from torch import Tensor

from tuner.engine.kv_cache import BlockAllocator, PagedKVCache
from tuner.engine.model import Transformer, make_batch
from tuner.engine.scheduler import Scheduler, Sequence
from tuner.engine.speculative import greedy_accept, ngram_propose, rejection_accept
from tuner.knobs.registry import unhandled
from tuner.specs import MTP

__all__ = [
    "Engine",
    "EngineLimits",
    "BACKEND_KNOBS",
    "limits_for",
    "unsupported_knob",
    "make_cache",
    "prefill_logits",
    "run_to_completion",
]


@dataclass(frozen=True)
class EngineLimits:
    """Scheduler and cache sizes of one engine instance."""

    max_num_seqs: int = 8
    max_num_batched_tokens: int = 512
    num_blocks: int = 256
    block_size: int = 16
    kv_dtype: str = "auto"
    enable_chunked_prefill: bool = True


# Knobs the torch backend applies in its own code (weights, speculation, the device count, the
# memory share, the prefix-caching note); every other knob reaches the engine as a field above.
BACKEND_KNOBS = frozenset(
    {
        "quantization",
        "draft_model",
        "num_speculative_tokens",
        "tensor_parallel_size",
        "gpu_memory_utilization",
        "enable_prefix_caching",
    }
)


def unsupported_knob(config: BaseModel) -> str | None:
    """Why the reference engine cannot run `config`: a knob off its default that it does not
    honour (a new knob without an EngineLimits field is refused, never silently dropped)."""
    if getattr(config, "draft_model", None) == MTP and getattr(config, "num_speculative_tokens", 0):
        return "draft_model mtp: the reference engine runs no MTP layers"
    knob = unhandled(config, BACKEND_KNOBS | {f.name for f in fields(EngineLimits)})
    return f"{knob}: the reference engine does not implement this knob" if knob else None


def limits_for(config: BaseModel, num_blocks: int) -> EngineLimits:
    """The limits of one EngineConfig variant: each EngineLimits field read by its knob's name."""
    values = config.model_dump(mode="json")
    knobs = {f.name for f in fields(EngineLimits)} - {"num_blocks"}
    return EngineLimits(num_blocks=num_blocks, **{name: values[name] for name in knobs})


def make_cache(
    model: Transformer, num_blocks: int, block_size: int, kv_dtype: str, use_triton: bool = False
) -> PagedKVCache:
    """A paged KV cache shaped for `model`, on its device and in its dtype."""
    spec, w = model.spec, model.model.embed_tokens.weight
    return PagedKVCache(
        num_layers=spec.num_layers,
        num_blocks=num_blocks,
        block_size=block_size,
        num_kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim_,
        storage=kv_dtype,
        act_dtype=w.dtype,
        device=w.device,
        use_triton=use_triton,
    )


class Engine:
    """Continuous batching over a paged cache, with optional speculative decoding."""

    def __init__(
        self,
        model: Transformer,
        limits: EngineLimits,
        *,
        draft: Transformer | None = None,
        ngram_draft: bool = False,
        num_speculative_tokens: int = 0,
        temperature: float = 0.0,
        seed: int = 0,
        use_triton: bool = False,
        compile: bool = False,
    ) -> None:
        self.model, self.limits, self.temperature = model, limits, temperature
        # compile=True: the target's forward runs through torch.compile (tuner/engine/compile.py).
        self._target_forward: Callable[..., Tensor] = model
        if compile:
            from tuner.engine.compile import compile_forward

            self._target_forward = compile_forward(model)
        self.device = model.model.embed_tokens.weight.device
        self.cache = make_cache(
            model, limits.num_blocks, limits.block_size, limits.kv_dtype, use_triton
        )
        self.k = num_speculative_tokens if (draft is not None or ngram_draft) else 0
        self.draft, self.ngram_draft = draft, ngram_draft
        self.draft_cache = (
            make_cache(draft, limits.num_blocks, limits.block_size, limits.kv_dtype, use_triton)
            if draft is not None
            else None
        )
        self.scheduler = Scheduler(
            max_num_seqs=limits.max_num_seqs,
            max_num_batched_tokens=limits.max_num_batched_tokens,
            allocator=BlockAllocator(limits.num_blocks),
            block_size=limits.block_size,
            enable_chunked_prefill=limits.enable_chunked_prefill,
            decode_tokens=1 + self.k,
        )
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._next_id = 0
        self.proposed_tokens = 0
        self.accepted_tokens = 0
        # Per draft slot i: verify steps that reached slot i (slots before it all accepted), and
        # those whose slot i emitted a drafted token. Counted on the tokens a request kept, so a
        # step cut by a stop token or max_new_tokens counts only up to the cut.
        self.slot_reached = [0] * self.k
        self.slot_accepted = [0] * self.k
        self.steps = 0

    def add_request(
        self, prompt: list[int], max_new_tokens: int, stop_token_ids: frozenset[int] = frozenset()
    ) -> Sequence:
        """Queue a prompt; tokens appear in the returned Sequence as steps run (until
        max_new_tokens or, inclusive, the first of stop_token_ids)."""
        seq = Sequence(
            self._next_id, list(prompt), len(prompt), max_new_tokens, stop_token_ids=stop_token_ids
        )
        self._next_id += 1
        self.scheduler.add(seq)
        return seq

    @property
    def has_work(self) -> bool:
        """True while any request is waiting or running."""
        return bool(self.scheduler.waiting or self.scheduler.running)

    def _probs(self, logits: Tensor) -> Tensor:
        return F.softmax(logits / self.temperature, -1)

    def _sample(self, logits: Tensor) -> list[int]:
        """logits [R, V] -> one token per row (greedy at temperature 0)."""
        if self.temperature == 0:
            return logits.argmax(-1).tolist()
        return torch.multinomial(self._probs(logits), 1, generator=self.generator)[:, 0].tolist()

    def _forward(
        self,
        model: Transformer,
        cache: PagedKVCache,
        runs: list[tuple[Sequence, int, list[int]]],
        want: list[list[int]],
    ) -> list[Tensor]:
        """Run (seq, start position, tokens) runs; return logits [len(want[i]), V] per run."""
        batch = make_batch(
            [(s.blocks, start, len(toks)) for s, start, toks in runs],
            self.limits.block_size,
            self.device,
        )
        flat = [t for _, _, toks in runs for t in toks]
        offsets, rows = 0, []
        for (_, _, toks), w in zip(runs, want, strict=True):
            rows += [offsets + i for i in w]
            offsets += len(toks)
        forward = self._target_forward if model is self.model else model
        # Compiled steps freeze weights only without autograd; eager steps run as before.
        mode = torch.inference_mode() if forward is not model else contextlib.nullcontext()
        with mode:
            logits = forward(
                torch.tensor(flat, device=self.device),
                batch,
                cache,
                torch.tensor(rows, device=self.device, dtype=torch.long),
            )
        out, at = [], 0
        for w in want:
            out.append(logits[at : at + len(w)])
            at += len(w)
        return out

    def _propose(self, plan: list[tuple[Sequence, int]]) -> dict[int, tuple[list[int], Tensor]]:
        """Draft k tokens per decoding sequence (and feed prefill chunks to the draft cache)."""
        assert self.draft is not None and self.draft_cache is not None
        proposals: dict[int, tuple[list[int], list[Tensor]]] = {}
        runs: list[tuple[Sequence, int, list[int]]] = []
        want: list[list[int]] = []
        decoding: list[Sequence] = []
        for seq, n in plan:
            if seq.in_prefill:  # keep the draft cache in step with the target's prefill
                runs.append(
                    (seq, seq.draft_computed, seq.tokens[seq.draft_computed : seq.num_computed + n])
                )
                want.append([])
            else:
                toks = seq.tokens[seq.draft_computed :]  # catch up: 1 token, 2 after full accept
                runs.append((seq, seq.draft_computed, toks))
                want.append([len(toks) - 1])
                decoding.append(seq)
                proposals[seq.seq_id] = ([], [])
        for j in range(self.k):
            if not runs or not decoding:
                break
            if j > 0:
                runs = [(s, s.draft_computed, [proposals[s.seq_id][0][-1]]) for s in decoding]
                want = [[0] for _ in decoding]
            logits = self._forward(self.draft, self.draft_cache, runs, want)
            for (seq, _, toks), lg in zip(runs, logits, strict=True):
                seq.draft_computed += len(toks)
                if seq.seq_id in proposals and lg.shape[0]:
                    tok = self._sample(lg)[0]
                    proposals[seq.seq_id][0].append(tok)
                    proposals[seq.seq_id][1].append(lg[0])
        return {
            sid: (toks, torch.stack(lgs) if lgs else torch.empty(0))
            for sid, (toks, lgs) in proposals.items()
        }

    def _propose_ngram(
        self, plan: list[tuple[Sequence, int]]
    ) -> dict[int, tuple[list[int], Tensor]]:
        """Prompt-lookup proposals; the draft 'logits' are one-hot (q = 1 on each proposal)."""
        vocab = self.model.spec.vocab_size
        out = {}
        for seq, _ in plan:
            if seq.in_prefill:
                continue
            toks = ngram_propose(seq.tokens, self.k)
            logits = torch.full((len(toks), vocab), float("-inf"), device=self.device)
            logits[torch.arange(len(toks)), torch.tensor(toks, dtype=torch.long)] = 0.0
            out[seq.seq_id] = (toks, logits)
        return out

    def step(self) -> list[tuple[Sequence, int]]:
        """Run one scheduler step; return (sequence, new tokens) for sequences that advanced."""
        plan = self.scheduler.schedule()
        if not plan:
            return []
        self.steps += 1
        if not self.k:
            proposals = {}
        elif self.ngram_draft:
            proposals = self._propose_ngram(plan)
        else:
            proposals = self._propose(plan)
        runs: list[tuple[Sequence, int, list[int]]] = []
        want: list[list[int]] = []
        for seq, n in plan:
            if seq.seq_id in proposals:  # verify last token + k draft tokens in one pass
                toks = [seq.tokens[-1], *proposals[seq.seq_id][0]]
                runs.append((seq, seq.num_computed, toks))
                want.append(list(range(len(toks))))
            else:
                toks = seq.tokens[seq.num_computed : seq.num_computed + n]
                ends = seq.num_computed + n == len(seq.tokens)
                runs.append((seq, seq.num_computed, toks))
                want.append([n - 1] if ends else [])
        logits = self._forward(self.model, self.cache, runs, want)
        advanced = []
        for (seq, _, toks), lg in zip(runs, logits, strict=True):
            if seq.seq_id in proposals:
                new = self._accept(lg, proposals[seq.seq_id])
                accepted = len(new) - 1
                seq.num_computed += len(new)  # last token + accepted drafts are now cached
                seq.draft_computed = min(seq.draft_computed, seq.num_computed)
            elif lg.shape[0]:
                seq.num_computed += len(toks)
                new = self._sample(lg)
            else:
                seq.num_computed += len(toks)
                new = []
            new = _until_stop(new[: seq.max_new_tokens - seq.num_generated], seq)
            if seq.seq_id in proposals:
                self._tally_slots(accepted, len(new))
            if new:
                seq.tokens += new
                advanced.append((seq, len(new)))
            if seq.finished:
                self.scheduler.finish(seq)
        return advanced

    def _tally_slots(self, accepted: int, kept: int) -> None:
        """Count one verify step: `accepted` drafts passed, `kept` of its tokens were kept."""
        passed = min(accepted, kept)
        # The slot after the accepted ones was reached (and rejected, or left empty by a short
        # n-gram proposal) unless the kept tokens end before it or all k slots passed.
        reached = passed + (1 if kept > accepted and accepted < self.k else 0)
        for i in range(reached):
            self.slot_reached[i] += 1
        for i in range(passed):
            self.slot_accepted[i] += 1

    def _accept(self, target_logits: Tensor, proposal: tuple[list[int], Tensor]) -> list[int]:
        draft_tokens, draft_logits = proposal
        self.proposed_tokens += len(draft_tokens)
        if self.temperature == 0:
            out = greedy_accept(target_logits, draft_tokens)
        else:
            out = rejection_accept(
                self._probs(target_logits),
                self._probs(draft_logits),
                draft_tokens,
                self.generator,
            )
        self.accepted_tokens += len(out) - 1
        return out

    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed draft tokens so far (0 without speculation)."""
        return self.accepted_tokens / self.proposed_tokens if self.proposed_tokens else 0.0


def _until_stop(new: list[int], seq: Sequence) -> list[int]:
    """`new` up to and including the first stop token of `seq` (marking it stopped)."""
    for i, tok in enumerate(new):
        if tok in seq.stop_token_ids:
            seq.stopped = True
            return new[: i + 1]
    return new


def run_to_completion(
    engine: Engine, prompts: list[list[int]], max_new_tokens: int
) -> list[list[int]]:
    """Generate for every prompt; return the generated tokens of each."""
    seqs = [engine.add_request(p, max_new_tokens) for p in prompts]
    while engine.has_work:
        engine.step()
    return [s.tokens[s.prompt_len :] for s in seqs]


def prefill_logits(
    model: Transformer,
    tokens: list[int],
    *,
    chunk_size: int | None = None,
    kv_dtype: str = "auto",
    block_size: int = 16,
) -> Tensor:
    """Logits [T, V] at every prompt position, computed one chunk of chunk_size at a time."""
    n = len(tokens)
    chunk = chunk_size or n
    cache = make_cache(model, -(-n // block_size), block_size, kv_dtype)
    table = list(range(-(-n // block_size)))
    device = model.model.embed_tokens.weight.device
    out = []
    for start in range(0, n, chunk):
        part = tokens[start : start + chunk]
        batch = make_batch([(table, start, len(part))], block_size, device)
        out.append(model(torch.tensor(part, device=device), batch, cache))
    return torch.cat(out)
