"""Synthetic multi-turn session workloads (`--sessions PRESET|FILE.yaml`) as a `Trace`.

A session is a conversation with one client: turns separated by think time, every prompt the
session so far (a system prompt shared by all sessions, earlier inputs and answers) plus the new
input (the user's words and, for agents and RAG, a tool output or retrieved passages). Sessions
start as a Poisson process; the result is a trace with recorded send times, replayed open-loop
like a trace file (a turn's time is its session's previous turn plus the think time, which
counts the time to read the answer), with block ids from `bench.session_blocks`, so prefix reuse
emerges from the requests instead of being a stated fraction.

The presets are stated assumptions of typical shapes, not measurements of any service: change
them with a YAML file (`preset: chat` then the fields to override).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tuner.bench.session_blocks import SessionBlocks
from tuner.bench.trace import BlockHashes, Trace
from tuner.bench.trace_file import MAX_TRACE_LINES, MAX_TRACE_TOKENS
from tuner.errors import InputError, echo
from tuner.yaml_read import load_yaml_model

__all__ = ["PRESETS", "SessionSpec", "load_sessions", "session_trace"]


class SessionSpec(BaseModel):
    """The shape of a session workload: sessions, turns, think time and each turn's tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: str | None = Field(default=None, description="Preset the other fields override")
    sessions: int = Field(default=100, ge=1, le=MAX_TRACE_LINES, description="Sessions")
    session_rate_per_s: float = Field(
        default=1.0, gt=0, le=1e4, description="New sessions per second (Poisson)"
    )
    turns: int = Field(default=6, ge=1, le=1000, description="Mean turns per session (+-50%)")
    think_time_s: float = Field(
        default=20.0, ge=0, le=86_400, description="Mean seconds between turns (exponential)"
    )
    system_prompt_tokens: int = Field(
        default=400, ge=0, le=MAX_TRACE_TOKENS, description="Shared by every session"
    )
    user_tokens: int = Field(default=120, ge=0, le=MAX_TRACE_TOKENS, description="Input per turn")
    tool_tokens: int = Field(
        default=0, ge=0, le=MAX_TRACE_TOKENS, description="Tool output or retrieved text per turn"
    )
    output_tokens: int = Field(default=350, ge=1, le=MAX_TRACE_TOKENS, description="Answer")
    length_spread: float = Field(default=0.5, ge=0, le=0.95, description="Uniform +- fraction")
    block_tokens: int = Field(default=64, ge=1, le=4096, description="Tokens per hashed block")
    seed: int = Field(default=0, ge=0, le=2**32 - 1)


# Stated shapes (assumptions, see docs/howto/traces.md): a chat assistant with a short system
# prompt; a coding agent resending a long tool-definition prompt and growing with tool results
# every step; RAG with fresh retrieved passages each turn.
PRESETS: dict[str, SessionSpec] = {
    "chat": SessionSpec(preset="chat"),
    "coding-agent": SessionSpec(
        preset="coding-agent",
        sessions=30,
        session_rate_per_s=0.2,
        turns=20,
        think_time_s=3.0,
        system_prompt_tokens=8000,
        user_tokens=40,
        tool_tokens=1200,
        output_tokens=250,
    ),
    "rag": SessionSpec(
        preset="rag",
        sessions=200,
        session_rate_per_s=2.0,
        turns=3,
        think_time_s=20.0,
        system_prompt_tokens=300,
        user_tokens=60,
        tool_tokens=2500,
        output_tokens=300,
    ),
}


def _draw(rng: np.random.Generator, mean: int, spread: float, size: int) -> np.ndarray:
    if mean == 0 or spread == 0:
        return np.full(size, mean, dtype=np.int64)
    lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return rng.integers(lo, hi + 1, size=size, dtype=np.int64)


def _turns(spec: SessionSpec, rng: np.random.Generator) -> list[tuple[float, int, int, int]]:
    """(send time, session, prompt, output) of every turn, unsorted."""
    starts = np.cumsum(rng.exponential(1.0 / spec.session_rate_per_s, size=spec.sessions))
    counts = _draw(rng, spec.turns, 0.5, spec.sessions)
    rows: list[tuple[float, int, int, int]] = []
    for s in range(spec.sessions):
        n = int(counts[s])
        new = _draw(rng, spec.user_tokens, spec.length_spread, n) + _draw(
            rng, spec.tool_tokens, spec.length_spread, n
        )
        out = np.maximum(1, _draw(rng, spec.output_tokens, spec.length_spread, n))
        gaps = rng.exponential(spec.think_time_s, size=n) if spec.think_time_s else np.zeros(n)
        t, history = float(starts[s]), spec.system_prompt_tokens
        for k in range(n):
            prompt = max(1, history + int(new[k]))
            if prompt + int(out[k]) > MAX_TRACE_TOKENS or len(rows) >= MAX_TRACE_LINES:
                break  # the session ran out of context (or the trace out of room)
            rows.append((t, s, prompt, int(out[k])))
            history = prompt + int(out[k])
            t += float(gaps[k]) if k + 1 < n else 0.0
    return rows


def session_trace(spec: SessionSpec) -> Trace:
    """The seeded trace of `spec`: every turn of every session, in send order."""
    rng = np.random.default_rng(spec.seed)
    rows = sorted(_turns(spec, rng), key=lambda r: (r[0], r[1]))
    blocks = SessionBlocks(spec.block_tokens, spec.system_prompt_tokens)
    flat: list[int] = []
    offsets = [0]
    for _t, s, prompt, output in rows:
        flat.extend(blocks.turn(str(s), prompt, output))
        offsets.append(len(flat))
    arrival = np.asarray([r[0] for r in rows], dtype=np.float64)
    arrival -= arrival[0]
    return Trace(
        arrival,
        np.asarray([r[2] for r in rows], dtype=np.int64),
        np.asarray([r[3] for r in rows], dtype=np.int64),
        BlockHashes(np.asarray(flat, np.int64), np.asarray(offsets, np.int64), spec.block_tokens),
        f"sessions:{spec.preset or 'custom'}",
    )


def _spec(name: str) -> SessionSpec:
    if name in PRESETS:
        return PRESETS[name]
    if not name.lower().endswith((".yaml", ".yml")):
        raise InputError(
            f"--sessions {echo(name)}: not a preset ({', '.join(PRESETS)}) or a .yaml file"
        )
    spec = load_yaml_model(Path(name), SessionSpec)
    if spec.preset is None:
        return spec
    if spec.preset not in PRESETS:
        raise InputError(f"{name}: preset {echo(spec.preset)} is not one of {', '.join(PRESETS)}")
    given = spec.model_dump(exclude_unset=True)
    return PRESETS[spec.preset].model_copy(update=given)


@lru_cache(maxsize=8)
def _cached(name: str, mtime_ns: int) -> Trace:
    return session_trace(_spec(name))


def load_sessions(name: str) -> Trace:
    """The trace of preset or YAML file `name`; one InputError line when it is neither."""
    mtime = 0
    if name not in PRESETS:
        try:
            mtime = Path(name).stat().st_mtime_ns
        except (OSError, ValueError):
            mtime = -1  # _spec says why in one line
    return _cached(name, mtime)
