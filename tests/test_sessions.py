"""`--sessions`: multi-turn sessions whose prompts resend the history, as a replayable trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tuner.bench.session_blocks import SessionBlocks
from tuner.bench.sessions import PRESETS, SessionSpec, load_sessions, session_trace
from tuner.cli import app
from tuner.errors import InputError
from tuner.perf.capacity import max_rate_meeting_sla
from tuner.request import build_request

pytestmark = pytest.mark.unit

runner = CliRunner()


def test_each_turn_resends_its_session_and_shares_the_system_prompt() -> None:
    blocks = SessionBlocks(block_tokens=100, shared_tokens=250)
    first = blocks.turn("a", prompt=290, output=120)  # system 250 + 40 new
    assert first == [0, 1, 4]  # 0, 1: the system prompt's full blocks; 4: partial, its own id
    second = blocks.turn("a", prompt=290 + 120 + 80, output=10)  # history 410 + 80 new
    # The history's 4 full blocks (the answer filled blocks 2 and 3), then a partial one.
    assert second[:4] == [0, 1, 2, 3] and len(second) == 5
    assert first[2] not in second  # a partial block is cached by no engine, so never matched
    other = blocks.turn("b", prompt=260, output=10)
    assert other[:2] == [0, 1] and not set(other[2:]) & set(second)
    third = blocks.turn("a", prompt=600, output=5)
    assert third[:4] == second[:4] and len(third) == 6


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_are_seeded_sorted_and_grow_per_session(preset: str) -> None:
    trace = session_trace(PRESETS[preset])
    again = session_trace(PRESETS[preset])
    assert np.array_equal(trace.input_tokens, again.input_tokens)
    assert np.all(np.diff(trace.arrival_s) >= 0) and trace.arrival_s[0] == 0
    assert 100 <= trace.count <= 1000  # a replay of seconds, not minutes
    assert trace.blocks is not None
    spec = PRESETS[preset]
    shared = spec.system_prompt_tokens // spec.block_tokens
    for i in range(trace.count):
        assert trace.blocks.of(i)[:shared] == list(range(shared))
    assert trace.input_tokens.max() > trace.input_tokens.min() + spec.output_tokens


def test_a_sessions_yaml_overrides_a_preset(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("preset: rag\nsessions: 5\nturns: 2\n", encoding="utf-8")
    trace = load_sessions(str(path))
    assert trace.count <= 5 * 3
    assert trace.input_tokens.min() >= PRESETS["rag"].system_prompt_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [("sessions: 0\n", "sessions"), ("preset: nope\n", "preset 'nope'"), ("x: 1\n", "x")],
)
def test_a_bad_sessions_yaml_is_one_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_sessions(str(path))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_preset_names_the_presets() -> None:
    result = runner.invoke(
        app, ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sessions", "voice"]
    )
    assert result.exit_code == 2
    assert "chat, coding-agent, rag" in result.stderr


@pytest.mark.parametrize("preset", ["chat", "rag"])
def test_prefix_caching_changes_the_capacity_of_a_session_workload(preset: str) -> None:
    capacity = {}
    for on in ("true", "false"):
        config, ctx = build_request(
            model="llama-3.1-8b",
            gpu="h200-sxm",
            sessions=preset,
            knob_flags={"enable_prefix_caching": on},
        )
        capacity[on] = max_rate_meeting_sla(config, ctx)
    # Each turn resends the history: with the cache most prefill is skipped.
    assert capacity["true"] > 1.3 * capacity["false"] > 0


def test_spec_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        SessionSpec(turns=0)
