"""Issue 33 item 1: a model id cannot write keys into a launch file.

`exports/vllm.yaml` opens with `# usage: vllm serve <model id> --config vllm.yaml`. Written raw, a
newline in the id ended the comment and the next line became a key vLLM applies:
`--model-source $'org/m\\ntrust-remote-code: true\\n#'` gave `trust-remote-code: true`. The id
also comes from a downloaded config.json's `_name_or_path`. Ids and names are now refused where
they enter (a control character, or a model id starting with '-') and quoted where written.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from tuner import catalog
from tuner.cli import app
from tuner.errors import InputError
from tuner.export import vllm
from tuner.export.bundle import ExportTarget
from tuner.run_spec import build_run_spec, load_run_spec
from tuner.specs import EngineConfig

pytestmark = pytest.mark.unit

runner = CliRunner()
HOSTILE = "org/m\ntrust-remote-code: true\n#"
TUNE = ["tune", "--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--sla", "chat", "--trials", "2"]
# A small dense config.json: what `--model DIR/config.json` reads.
DENSE_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
}


def _one_error_line(result: Result, code: int = 2) -> str:
    """The command exited `code` with exactly one `error:` line on stderr and no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _config_json(folder: Path, name_or_path: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({**DENSE_CONFIG, "_name_or_path": name_or_path}))
    return path


def test_the_reported_newline_model_source_is_refused_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = runner.invoke(app, [*TUNE, "--model-source", HOSTILE, "--run-dir", str(run)])
    line = _one_error_line(result)
    assert "model_source" in line and "U+000A" in line and "printable" in line
    assert "\n" not in line and not run.exists()  # nothing was written


def test_a_model_source_read_as_an_option_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(
        app, [*TUNE, "--model-source=--trust-remote-code", "--run-dir", str(tmp_path / "r")]
    )
    assert "starts with '-'" in _one_error_line(result)


def test_a_hostile_name_or_path_in_a_config_json_is_refused(tmp_path: Path) -> None:
    path = _config_json(tmp_path / "m", HOSTILE)
    with pytest.raises(InputError, match="_name_or_path.*U\\+000A"):
        catalog.load_model(str(path))
    result = runner.invoke(app, ["tune", "--model", str(path), "--gpu", "h200-sxm",
                                 "--run-dir", str(tmp_path / "run")])  # fmt: skip
    assert "_name_or_path" in _one_error_line(result)


def test_a_hand_edited_run_yaml_cannot_carry_a_newline_model_source(tmp_path: Path) -> None:
    spec = build_run_spec(model="llama-3.2-1b", gpu="h200-sxm")
    data = yaml.safe_load(spec.to_yaml())
    data["model_source"] = HOSTILE
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="model_source"):
        load_run_spec(path)


def test_the_exporters_refuse_a_newline_model_id_given_to_them_directly() -> None:
    with pytest.raises(InputError, match="model id"):
        ExportTarget(HOSTILE)
    with pytest.raises(InputError, match="model id"):
        vllm.export(EngineConfig(), HOSTILE)


@pytest.mark.parametrize(
    "model", ["org/m trust-remote-code: true #", 'it\'s a "model" #1', "a: b", "{x}", "~/m"]
)
def test_a_printable_model_id_is_quoted_so_it_reads_back_unchanged(model: str) -> None:
    exp = vllm.export(EngineConfig(), model)
    text = exp.files["vllm.yaml"]
    plain = yaml.safe_load(vllm.export(EngineConfig(), "m").files["vllm.yaml"])
    assert yaml.safe_load(text) == plain  # the id adds no key and changes no value
    usage = next(ln for ln in text.splitlines() if ln.startswith("# usage: "))
    assert shlex.split(usage.removeprefix("# usage: ")) == [
        "vllm", "serve", model, "--config", "vllm.yaml"
    ]  # fmt: skip
    script = exp.files[vllm.SCRIPT].replace(" \\\n    ", " ")
    assert shlex.split(script, comments=True)[:4] == ["exec", "vllm", "serve", model]
