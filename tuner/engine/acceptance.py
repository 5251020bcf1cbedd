"""Speculative acceptance measured per draft position, with real weights and real prompts.

The engine runs greedy speculative decoding over a prompt set; every verify step of a decoding
sequence counts, for each draft slot i, whether the step reached it (slots before it were all
accepted) and whether it emitted a drafted token there. per_position[i] = accepted_i / reached_i
is P(slot i accepted | slots before it accepted), the curve `tuner.perf.speculative` turns into
expected tokens per step. A slot the proposer left empty (n-gram lookup found no match, or
proposed fewer than k tokens) counts as rejected: the step emitted no drafted token there.

SmolLM2-135M is the only real checkpoint here and no smaller SmolLM2 exists, so the draft model
is the same weights quantized (int4 by default: the most lossy variant of the reference engine,
standing in for a smaller draft). The target runs in fp32: in bf16 the verify pass (k+1 rows)
and a draft's one-row decode step round differently and flip near-tied argmaxes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

from tuner.calibration_schema import AcceptanceCurve
from tuner.engine.generate import Engine, EngineLimits
from tuner.engine.model import Transformer
from tuner.errors import InputError
from tuner.specs import NGRAM

__all__ = [
    "DEFAULT_DRAFT_QUANTIZATION",
    "DEFAULT_MAX_NEW_TOKENS",
    "PROMPT_KINDS",
    "PROMPT_SET",
    "ChatPrompt",
    "SlotCounts",
    "chat_token_ids",
    "load_prompts",
    "measure_slots",
    "measure_smollm2",
]

PROMPT_SET = "tuner/data/prompts.jsonl"
PROMPT_KINDS = ("chat", "code")
DEFAULT_DRAFT_QUANTIZATION = "int4-awq"
# Output cap per prompt: keeps the default measurement of 32 prompts near a minute on 2 cores.
DEFAULT_MAX_NEW_TOKENS = 48
_BLOCK = 16


@dataclass(frozen=True)
class ChatPrompt:
    """One shipped prompt: an id, its kind (chat or code) and the user message."""

    id: str
    kind: str
    prompt: str


@dataclass(frozen=True)
class SlotCounts:
    """Per draft slot: verify steps that reached it and those that accepted it."""

    reached: tuple[int, ...]
    accepted: tuple[int, ...]
    tokens: int  # output tokens generated (prefill's first tokens included)
    wall_s: float

    @property
    def per_position(self) -> list[float]:
        """accepted_i / reached_i (0 for a slot never reached)."""
        return [a / r if r else 0.0 for a, r in zip(self.accepted, self.reached, strict=True)]

    @property
    def mean_tokens_per_step(self) -> float:
        """Tokens the verify steps emitted on average, counted directly (1 + accepted/step)."""
        steps = self.reached[0] if self.reached else 0
        return 1.0 + sum(self.accepted) / steps if steps else 1.0


def load_prompts(kind: str = "all") -> list[ChatPrompt]:
    """The shipped prompt set (tuner/data/prompts.jsonl), all of it or one kind."""
    if kind not in ("all", *PROMPT_KINDS):
        raise InputError(f"--kind {kind}: choose one of all, {', '.join(PROMPT_KINDS)}")
    text = resources.files("tuner").joinpath("data", "prompts.jsonl").read_text(encoding="utf-8")
    rows = [ChatPrompt(**json.loads(line)) for line in text.splitlines() if line.strip()]
    return [p for p in rows if kind in ("all", p.kind)]


def chat_token_ids(model_dir: Path, prompts: list[ChatPrompt]) -> tuple[list[list[int]], int]:
    """(token ids of each prompt as one user turn in the chat template, the stop token id)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    stop = json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"]
    template = config.get("chat_template")
    out = []
    for p in prompts:
        messages = [{"role": "user", "content": p.prompt}]
        # The same sandboxed Jinja rendering transformers' apply_chat_template uses.
        text = (
            ImmutableSandboxedEnvironment()
            .from_string(template)
            .render(messages=messages, add_generation_prompt=True)
            if template
            else p.prompt
        )
        out.append(tok.encode(text, add_special_tokens=not template).ids)
    return out, int(stop)


def measure_slots(
    target: Transformer,
    prompts: list[list[int]],
    *,
    k: int,
    draft: Transformer | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    stop_token_ids: frozenset[int] = frozenset(),
) -> SlotCounts:
    """Greedy speculative decoding of every prompt (n-gram proposals when draft is None); the
    per-slot counts of its verify steps."""
    if k < 1:
        raise InputError(f"--k {k}: must be at least 1")
    longest = max(len(p) for p in prompts) + max_new_tokens + k + 1
    blocks = -(-longest // _BLOCK) * len(prompts)
    limits = EngineLimits(
        max_num_seqs=len(prompts),
        max_num_batched_tokens=max(longest, 512),
        num_blocks=blocks,
        block_size=_BLOCK,
    )
    engine = Engine(
        target, limits, draft=draft, ngram_draft=draft is None, num_speculative_tokens=k
    )
    start = time.perf_counter()
    seqs = [engine.add_request(p, max_new_tokens, stop_token_ids) for p in prompts]
    with torch.inference_mode():
        while engine.has_work:
            engine.step()
    return SlotCounts(
        reached=tuple(engine.slot_reached),
        accepted=tuple(engine.slot_accepted),
        tokens=sum(s.num_generated for s in seqs),
        wall_s=time.perf_counter() - start,
    )


def measure_smollm2(
    *,
    draft: str,
    k: int = 4,
    kind: str = "all",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    draft_quantization: str = DEFAULT_DRAFT_QUANTIZATION,
    limit: int | None = None,
) -> tuple[AcceptanceCurve, SlotCounts]:
    """Measure SmolLM2-135M-Instruct's acceptance curve on the shipped prompts; draft is
    'ngram' or 'model' (the same weights quantized to draft_quantization)."""
    from tuner.catalog import load_model
    from tuner.engine.quantize import quantize_model
    from tuner.engine.weights import build_model
    from tuner.real_model import SMOLLM2_CATALOG_NAME, ensure_smollm2

    if draft not in (NGRAM, "model"):
        raise InputError(f"--draft {draft}: choose ngram or model")
    chosen = load_prompts(kind)[:limit]
    path = ensure_smollm2()
    ids, stop = chat_token_ids(path, chosen)
    spec = load_model(SMOLLM2_CATALOG_NAME)
    target = build_model(spec, model_path=path, dtype=torch.float32)
    draft_model, name = None, NGRAM
    if draft == "model":
        draft_model = build_model(spec, model_path=path)
        quantize_model(draft_model, draft_quantization)
        name = f"{SMOLLM2_CATALOG_NAME}@{draft_quantization}"
    counts = measure_slots(
        target,
        ids,
        k=k,
        draft=draft_model,
        max_new_tokens=max_new_tokens,
        stop_token_ids=frozenset({stop}),
    )
    if not counts.reached or not counts.reached[0]:
        raise InputError("no verify step ran: raise --max-new-tokens")
    label = f"{PROMPT_SET} ({kind}, {len(chosen)} prompts, greedy, <= {max_new_tokens} tokens)"
    curve = AcceptanceCurve(
        draft=name, per_position=counts.per_position, prompts=label, tokens_measured=counts.tokens
    )
    return curve, counts
