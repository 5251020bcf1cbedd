"""tuner.export.dispatch: one variant to every engine's files, refusals kept as reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.answer.picks import EnginePick
from tuner.errors import InputError
from tuner.export.dispatch import export_config, expressible
from tuner.run.export_trial import export_trial
from tuner.run.exports import write_exports, write_picked_exports
from tuner.run.tune import tune
from tuner.run_spec import build_run_spec
from tuner.search.trials import TrialRecord
from tuner.specs import EngineConfig, Quantization

# nvfp4 needs FP4 tensor cores: on an H100 vLLM falls back to weight-only, SGLang and TRT-LLM
# refuse it.
NVFP4 = EngineConfig(quantization=Quantization.nvfp4)


def test_every_engine_answers_with_files_or_its_reason() -> None:
    spec = build_run_spec(model="llama-3.1-8b", gpu="h100-sxm")
    out = export_config(NVFP4, spec)
    assert set(out) == {"vllm", "sglang", "trtllm"}
    assert not isinstance(out["vllm"], str)
    assert isinstance(out["sglang"], str) and expressible("sglang", NVFP4, spec) == out["sglang"]
    assert expressible("vllm", EngineConfig(), spec) is None
    assert set(export_config(EngineConfig(), spec, engines=("sglang",))) == {"sglang"}


def test_write_exports_writes_each_engines_files_and_says_why_not(tmp_path: Path) -> None:
    spec = build_run_spec(model="llama-3.1-8b", gpu="h100-sxm")
    write_exports(NVFP4, spec, tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert (tmp_path / "vllm.sh").is_file() and not (tmp_path / "sglang.sh").exists()
    assert "## sglang: not expressible" in readme and "## trtllm: not expressible" in readme
    assert "quantization: nvfp4" in readme


def test_write_picked_exports_heads_each_engine_with_its_note(tmp_path: Path) -> None:
    spec = build_run_spec(model="llama-3.1-8b", gpu="h100-sxm")
    pick = TrialRecord(number=4, state="complete", params={}, config=EngineConfig())
    export = export_config(EngineConfig(), spec, engines=("vllm",))["vllm"]
    assert not isinstance(export, str)
    picks: dict[str, EnginePick | str] = {
        "vllm": EnginePick(pick, export, "the recommended variant", primary=True),
        "sglang": "no front variant is expressible",
    }
    write_picked_exports(picks, tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert (tmp_path / "vllm.sh").is_file() and not (tmp_path / "sglang.sh").exists()
    assert ": the recommended variant" in readme and "## sglang: nothing to export" in readme


def test_export_trial_writes_a_trial_folder_or_says_why_not(tmp_path: Path) -> None:
    spec = build_run_spec(model="llama-3.2-1b", gpu="h100-sxm", trials=4)
    run = tmp_path / "run"
    records = tune(spec, run, fresh=True).records
    done = next(r for r in records if r.config is not None)
    out = export_trial(run, done.number)
    assert out.folder == run / "exports" / f"trial-{done.number}"
    assert (out.folder / "README.md").is_file() and set(out.exports) == {"vllm", "sglang", "trtllm"}
    last = max(r.number for r in records)  # the 4 sampled trials and any refinement steps
    with pytest.raises(InputError, match=rf"no trial 99 \(trials 0\.\.{last}\)"):
        export_trial(run, 99)
