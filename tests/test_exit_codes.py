"""Issue 33, item 6: a user's or the environment's problem exits 2 or 4, never 1 ("internal error").

Exit 2: the input is wrong (a path of the wrong kind, a non-finite or out-of-range number, a
boolean where a number belongs). Exit 4: the backend or the storage could not run (a full or
read-only disk, a missing database driver, a vLLM that starts no server). Exit 1 stays for bugs.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.errors import environment_error

runner = CliRunner()
PLAN = ["plan", "--model", "llama-3.1-8b", "--gpus", "h100-sxm"]
FAKE_SERVER = Path(__file__).with_name("_fake_openai.py")
PROFILES = Path(__file__).parents[1] / "hardware_profiles"


def _fails(result, code: int) -> str:  # noqa: ANN001 (click Result)
    """The command exited `code` with one `error:` line, no traceback, no "internal error"."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output
    # Progress notes ("planning 1 GPU kind(s)...") may come first; the error is one line.
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and result.stderr.rstrip().endswith(lines[0]), result.stderr
    return lines[0]


# -- the one fallback: OSError by errno ------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("code", "exit_code", "words"),
    [
        (errno.ENOSPC, 4, "no space left"),
        (errno.EROFS, 4, "read-only file system"),
        (errno.EACCES, 4, "permission denied"),
        (errno.EDQUOT, 4, "quota"),
        (errno.ENOTDIR, 2, "a file is where a folder is expected"),
        (errno.EISDIR, 2, "a folder is where a file is expected"),
        (errno.ENOENT, 2, "No such file"),
    ],
)
def test_an_os_error_maps_by_errno_to_one_line_naming_the_path(
    code: int, exit_code: int, words: str
) -> None:
    exc = OSError(code, os.strerror(code), "/runs/x/trials.csv")
    found = environment_error(RuntimeError("wrapped").with_traceback(None))
    assert found is None  # not an environment error: still a bug
    wrapper = RuntimeError("while writing")
    wrapper.__cause__ = exc
    for raised in (exc, wrapper):
        found = environment_error(raised)
        assert found is not None
        line, got = found
        assert got == exit_code and "/runs/x/trials.csv" in line and words in line


@pytest.mark.unit
def test_a_full_disk_while_writing_exits_4_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: object, **kw: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "p" / "plan.csv"))

    monkeypatch.setattr("tuner.cli.plan_cmd.write_plan_folder", full)
    line = _fails(runner.invoke(app, [*PLAN, "--rate", "1", "--run-dir", str(tmp_path / "p")]), 4)
    assert "no space left on the device" in line and "plan.csv" in line


@pytest.mark.unit
def test_a_bug_is_still_an_internal_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def bug(*args: object, **kw: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("tuner.cli.plan_cmd.write_plan_folder", bug)
    result = runner.invoke(app, [*PLAN, "--rate", "1", "--run-dir", str(tmp_path / "p")])
    assert result.exit_code == 1 and "internal error" in result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_exits_4_or_2_never_1(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        result = runner.invoke(app, [*PLAN, "--rate", "1", "--run-dir", str(ro / "p")])
    finally:
        ro.chmod(0o700)
    assert result.exit_code in (2, 4) and "internal error" not in result.stderr


@pytest.mark.unit
def test_a_file_where_a_folder_is_expected_exits_2(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    _fails(runner.invoke(app, [*PLAN, "--rate", "1", "--run-dir", str(tmp_path / "f" / "p")]), 2)


@pytest.mark.skipif(
    importlib.util.find_spec("MySQLdb") is not None, reason="the MySQL driver is installed"
)
def test_a_missing_database_driver_exits_4(tmp_path: Path) -> None:
    argv = ["tune", "--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--trials", "1"]
    storage = ["--storage", "mysql://u@127.0.0.1/db", "--run-dir", str(tmp_path / "r")]
    line = _fails(runner.invoke(app, [*argv, *storage]), 4)
    assert "MySQLdb" in line and "not installed" in line


# -- numbers: finite, in range, never a boolean ----------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    "args",
    [
        ["--rate", "inf"],
        ["--rate", "nan"],
        ["--users", "4", "--think-time", "inf"],
        ["--rate", "1", "--ttft-ms", "inf"],
        ["--rate", "1", "--tpot-ms", "nan"],
    ],
)
def test_plan_refuses_non_finite_numbers(args: list[str], tmp_path: Path) -> None:
    _fails(runner.invoke(app, [*PLAN, *args, "--run-dir", str(tmp_path / "p")]), 2)


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--url", "http://127.0.0.1:9", "--seed", "-1"],
        ["bench", "--url", "http://127.0.0.1:9", "--seed", str(2**64)],
        ["bench", "--url", "http://127.0.0.1:99999"],
        ["bench", "--url", "http://127.0.0.1:0"],
        ["tune", "--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--seed", "-1"],
    ],
)
def test_out_of_range_seeds_and_ports_exit_2(argv: list[str]) -> None:
    _fails(runner.invoke(app, argv), 2)


def _profile(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load((PROFILES / "h100-sxm.yaml").read_text())
    data.update(name="h100-custom", **changes)
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.unit
@pytest.mark.parametrize(
    "changes",
    [
        {"memory_bandwidth_gbps": float("inf")},
        {"fp16_tflops": float("inf")},
        {"memory_gib": float("nan")},
        {"memory_gib": True},
        {"sm_count": True},
    ],
)
def test_a_gpu_profile_with_an_infinite_or_boolean_number_exits_2(
    changes: dict[str, object], tmp_path: Path
) -> None:
    gpu = _profile(tmp_path, **changes)
    argv = ["plan", "--model", "llama-3.1-8b", "--gpus", str(gpu), "--rate", "1"]
    line = _fails(runner.invoke(app, [*argv, "--run-dir", str(tmp_path / "p")]), 2)
    assert next(iter(changes)) in line


@pytest.mark.unit
def test_an_infinite_price_is_not_the_cheapest_but_an_input_error(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "name: p\nprices:\n  h100-sxm:\n    usd_per_gpu_hour: .inf\n    provider: X\n"
        "    source: https://example.com/prices\n    checked: 2026-01-01\n"
    )
    argv = [*PLAN, "--rate", "1", "--prices", str(prices), "--run-dir", str(tmp_path / "p")]
    assert "usd_per_gpu_hour" in _fails(runner.invoke(app, argv), 2)


@pytest.mark.unit
@pytest.mark.parametrize("text", ["ttft_ms: .inf\n", "ttft_ms: true\n", "tpot_ms: .nan\n"])
def test_an_sla_file_with_an_infinite_or_boolean_bound_exits_2(text: str, tmp_path: Path) -> None:
    sla = tmp_path / "sla.yaml"
    sla.write_text("name: mine\n" + text)
    argv = [*PLAN, "--rate", "1", "--sla", str(sla), "--run-dir", str(tmp_path / "p")]
    _fails(runner.invoke(app, argv), 2)


# -- a backend that cannot run at all --------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_a_vllm_tune_where_no_server_starts_exits_4_with_the_servers_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.backends.vllm import VLLMBackend

    # Every variant's "server" dies at startup the way vLLM does without local weights.
    crash = "OSError: no weights found at /nowhere"
    monkeypatch.setattr(
        VLLMBackend,
        "command",
        lambda self, config, ctx, port: [
            sys.executable,
            str(FAKE_SERVER),
            "--port",
            str(port),
            "--fake-crash",
            crash,
        ],  # fmt: skip
    )
    argv = ["tune", "--backend", "vllm", "--model", "smollm2-135m", "--trials", "2"]
    result = runner.invoke(app, [*argv, "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 4, result.output
    assert "could not run" in result.stderr and crash in result.stderr


@pytest.mark.parametrize("gpus", ["1025", "99999999999999999999"])
def test_more_gpus_than_a_deployment_pool_can_hold_is_one_line_and_exit_2(
    gpus: str, tmp_path: Path
) -> None:
    # Found by the CLI fuzz: the disaggregated comparison built a 1025-worker pool and the run
    # ended in an internal error (exit 1) after its trials.
    result = CliRunner().invoke(
        app,
        ["tune", "--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--trials", "2",
         "--run-dir", str(tmp_path / "run"), "--num-gpus", gpus],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--num-gpus" in result.output and "1024" in result.output
    assert not (tmp_path / "run").exists()
