"""Foundation: schemas reject bad input with one line, CLI exit codes, packaging of data."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner import catalog
from tuner.cli import app
from tuner.errors import InputError
from tuner.specs import SLA, EngineConfig, SearchSpace, Workload

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _one_error_line(result) -> str:
    out = result.output.strip()
    assert "Traceback" not in out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("cmd", ["profiles", "models", "spaces", "slas", "detect"])
def test_listing_commands_exit_zero(cmd: str) -> None:
    result = runner.invoke(app, [cmd])
    assert result.exit_code == 0, result.output


def test_detect_without_driver_says_so_in_one_line() -> None:
    result = runner.invoke(app, ["detect"])
    assert result.exit_code == 0
    if "No NVIDIA GPU detected" in result.output:
        assert len(result.output.strip().splitlines()) <= 2  # Rich may wrap a long reason


@pytest.mark.parametrize(
    ("kind", "name", "suggestion"),
    [
        ("gpu", "h200-sxmm", "h200-sxm"),
        ("model", "llama-3.1-8", "llama-3.1-8b"),
        ("space", "defualt", "default"),
        ("sla", "chatt", "chat"),
    ],
)
def test_unknown_name_suggests_close_match(kind: str, name: str, suggestion: str) -> None:
    result = runner.invoke(app, ["show", kind, name])
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert repr(name) in line and suggestion in line and "Allowed:" in line


def test_show_gpu_by_nvml_alias() -> None:
    result = runner.invoke(app, ["show", "gpu", "NVIDIA H200"])
    assert result.exit_code == 0
    assert "name: h200-sxm" in result.output


BAD_FILES = {
    "gpu": ("name: x\nmemory_gib: -4\n", "memory_gib"),
    "model": ("name: m\nhidden_size: 64\nnum_layers: two\n", "num_layers"),
    "space": (
        "quantization: [bf17]\nkv_dtype: [auto]\nmax_num_batched_tokens: [512]\n"
        "max_num_seqs: [1]\n",
        "quantization",
    ),
    "sla": ("name: s\nttft_ms: 100\npercentile: 97\n", "percentile"),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_values_name_file_and_field(kind: str, tmp_path: Path) -> None:
    text, field = BAD_FILES[kind]
    path = tmp_path / f"bad-{kind}.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path), "--kind", kind])
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert str(path) in line and f"'{field}" in line


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_malformed_yaml_gives_line_and_column(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nvalues: [1, 2\n")
    result = runner.invoke(app, ["validate", str(path), "--kind", kind])
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "malformed YAML" in line and "line" in line


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_unknown_key_lists_allowed_fields(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text("name: x\nbogus_knob: 3\n")
    result = runner.invoke(app, ["validate", str(path), "--kind", kind])
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "bogus_knob" in line and "allowed fields" in line


def test_valid_custom_sla_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nttft_ms: 250\ntpot_ms: 20\npercentile: 99\n")
    result = runner.invoke(app, ["validate", str(path), "--kind", "sla"])
    assert result.exit_code == 0, result.output
    assert catalog.load_sla(str(path)) == SLA(name="mine", ttft_ms=250, tpot_ms=20, percentile=99)


def test_hf_config_errors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="malformed JSON"):
        catalog.load_model(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(InputError, match="num_layers"):
        catalog.load_model(str(tmp_path))
    with pytest.raises(InputError, match="no such file"):
        catalog.load_model(str(tmp_path / "missing" / "config.json"))


def test_cross_field_errors_name_both_values() -> None:
    with pytest.raises(ValueError, match="num_speculative_tokens=3 needs a draft_model"):
        EngineConfig(num_speculative_tokens=3)
    with pytest.raises(ValueError, match="rate_rps=2 and concurrency=4 are exclusive"):
        Workload(rate_rps=2.0, concurrency=4)
    with pytest.raises(ValueError, match="num_speculative_tokens must lie in 0..8"):
        SearchSpace(
            quantization=["bf16"],
            kv_dtype=["auto"],
            max_num_batched_tokens=[512],
            max_num_seqs=[1],
            num_speculative_tokens=[9],
            draft_model=["ngram"],
        )


def test_every_packaged_space_and_sla_validates() -> None:
    assert {"default", "latency", "throughput"} <= set(catalog.list_names("search_spaces"))
    slas = {s.name: s for s in catalog.all_slas()}
    assert (slas["voice"].ttft_ms, slas["voice"].tpot_ms) == (300, 40)
    assert (slas["chat"].ttft_ms, slas["chat"].tpot_ms) == (500, 50)
    assert (slas["code"].ttft_ms, slas["code"].tpot_ms) == (200, 30)
    assert (slas["interactive-chat"].ttft_ms, slas["interactive-chat"].tpot_ms) == (400, 25)
    assert slas["autocomplete"].ttft_ms == 150 and slas["autocomplete"].tpot_ms is None
    assert slas["batch"].is_throughput_only
    assert all(s.percentile == 95 for s in slas.values())


def test_import_tuner_does_not_import_torch() -> None:
    code = "import sys, tuner, tuner.catalog, tuner.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci_lines = [
        ln
        for ln in (ROOT / ".ci/run").read_text().splitlines()
        if ln and not ln.startswith(("#", "set ", "cd "))
    ]
    assert len(ci_lines) == 1
    assert ci_lines[0] in readme


def test_wheel_ships_the_yaml_catalogs(tmp_path: Path) -> None:
    """The top-level catalogs travel inside the wheel; an installed wheel lists them."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("tuner-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for kind in ("hardware_profiles", "models", "search_spaces", "slas", "prices"):
        assert any(
            n.startswith(f"tuner/_catalogs/{kind}/") and n.endswith(".yaml") for n in names
        ), kind
    assert "tuner/data/prompts.jsonl" in names  # the prompts `tuner acceptance` measures on
    assert "tuner/data/validation_bands.json" in names  # tuner.perf.bands reads it
    # A clean venv with only the wheel installed (dependencies borrowed from this venv's
    # site-packages by path, so its editable install of the checkout is not seen).
    clean = tmp_path / "clean"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(clean)], check=True)
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PYTHONPATH": f"{site}:{deps}", "COLUMNS": "400", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [
            str(clean / "bin" / "python"),
            "-c",
            "import tuner, tuner.catalog as c; print(tuner.__file__);"
            "print(len(c.list_names('hardware_profiles')))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0].startswith(str(site)), out
    assert int(out[1]) == len(catalog.list_names("hardware_profiles"))
    listed = subprocess.run(
        [str(clean / "bin" / "python"), "-m", "tuner", "profiles"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0, listed.stderr
    for name in catalog.list_names("hardware_profiles"):
        assert name in listed.stdout, name
