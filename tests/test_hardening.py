"""Issue 11: bad input, interruptions and re-used folders never give a traceback or mix runs.

One test (or parametrised group) per class of the issue; tests/test_cli_fuzz.py fuzzes the same
classes together.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import threading
from pathlib import Path

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tests._fake_backend import FakeBackend
from tuner import catalog
from tuner.cli import app
from tuner.errors import echo, one_line
from tuner.run.folder import claim_run_dir
from tuner.search import study as search
from tuner.search.study import grid_values
from tuner.specs import SLA, Context, IntRange, SearchSpace, Workload

runner = CliRunner()
TUNE = ["tune", "--gpu", "h200-sxm", "--sla", "chat"]


def _fails_in_one_line(result, code: int = 2) -> str:
    """The command exited `code` with exactly one `error:` line and no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


# -- 1. runs never merge -------------------------------------------------------------------------


def test_a_second_run_into_one_run_folder_is_refused_and_the_first_is_untouched(
    tmp_path: Path,
) -> None:
    run = tmp_path / "R"
    first = runner.invoke(app, [*TUNE, "--model", "llama-3.2-1b", "--trials", "8",
                                "--run-dir", str(run)])  # fmt: skip
    assert first.exit_code == 0, first.output
    before = (run / "trials.csv").read_text()
    other = runner.invoke(app, [*TUNE, "--model", "llama-3.1-70b", "--trials", "12",
                                "--run-dir", str(run)])  # fmt: skip
    line = _fails_in_one_line(other)
    assert "holds another run" in line and "model" in line and "--resume" in line
    assert (run / "trials.csv").read_text() == before
    assert yaml.safe_load((run / "run.yaml").read_text())["model"]["name"] == "llama-3.2-1b"
    # The same run again is a continuation, not a mix.
    again = runner.invoke(app, [*TUNE, "--model", "llama-3.2-1b", "--trials", "10",
                                "--run-dir", str(run)])  # fmt: skip
    assert again.exit_code == 0, again.output
    assert len(_rows(run / "trials.csv")) == 10


def test_run_folder_names_never_collide(tmp_path: Path) -> None:
    claimed: list[Path] = []
    threads = [threading.Thread(target=lambda: claimed.append(claim_run_dir(tmp_path, "same")))
               for _ in range(8)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(claimed)) == 8 and all(p.is_dir() for p in claimed)


def _study() -> optuna.Study:
    sampler = optuna.samplers.RandomSampler(seed=0)
    return search.create_study(None, "s", SLA(), sampler)


def test_cached_metrics_are_reused_only_for_the_same_model_gpu_sla_workload_backend() -> None:
    space = SearchSpace(quantization=["bf16"], kv_dtype=["auto"], max_num_batched_tokens=[8192],
                        max_num_seqs=[64, 128])  # fmt: skip
    ctx = Context(model=catalog.load_model("llama-3.2-1b"), gpu=catalog.load_gpu("h200-sxm"),
                  sla=SLA(), workload=Workload(concurrency=8))  # fmt: skip
    study, a, b = _study(), FakeBackend(), FakeBackend()
    search.optimize(study, search.Evaluator(a, ctx, space, metrics_key="1b"), trials=6)
    assert a.calls == 2  # two distinct variants, the rest reused
    other = ctx.model_copy(update={"model": catalog.load_model("llama-3.1-70b")})
    search.optimize(study, search.Evaluator(b, other, space, metrics_key="70b"), trials=12)
    assert b.calls == 2  # measured again for the other model, never borrowed


# -- 2. every override validated -----------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--resume", "{run}", "--trials", "0"],
        ["--model", "llama-3.2-1b", "--trials", "0", "--run-dir", "{tmp}/x"],
        ["--resume", "{run}", "--model", "llama-3.1-70b"],
        ["--config", "{run}/run.yaml", "--sla", "batch", "--run-dir", "{tmp}/y"],
        ["--model", "llama-3.2-1b", "--timeout", "nan", "--run-dir", "{tmp}/z"],
        # An unbounded trial count once ran a CI job into its timeout: a typo, not a plan.
        ["--model", "llama-3.2-1b", "--trials", "99999999999999999999", "--run-dir", "{tmp}/x"],
        ["--resume", "{run}", "--trials", "100001"],
    ],
)
def test_overrides_are_validated(args: list[str], tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run).mkdir()
    (run / "run.yaml").write_text("model: x\n")
    argv = ["tune", *(a.format(run=run, tmp=tmp_path) for a in args)]
    _fails_in_one_line(runner.invoke(app, argv))
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# -- 3. user text is escaped -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["[/]", "x[v2]", "[bold]y", "a\\[b]"])
def test_bracketed_names_are_printed_literally(name: str) -> None:
    line = _fails_in_one_line(runner.invoke(app, ["show", "model", name]))
    assert repr(name) in line


# -- 5. bench validates every server message -------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"raw_data": ("[1,2,3]",)},
        {"raw_data": ("null",)},
        {"raw_data": ('{"choices": "x"}',)},
        {"raw_data": ('{"choices": [{"text": 5}], "usage": [1]}',)},
        {"raw_data": ('{"choices": [{"text": "a"}], "usage": {"completion_tokens": "many"}}',)},
        {"raw_data": ("{not json",)},
        {"cut_after": 1},
    ],
)
def test_bench_counts_malformed_or_cut_streams_as_failed_requests(config: dict) -> None:
    from tests._fake_openai import FakeServerConfig, running_fake_server
    from tuner.bench.loadgen import Endpoint, LoadOptions, run_workload

    cfg = FakeServerConfig(ttft_s=0.001, itl_s=0.001, **config)
    with running_fake_server(cfg) as srv:
        workload = Workload(input_tokens=8, output_tokens=64, concurrency=2, num_requests=4)
        m = run_workload(Endpoint(srv.url), workload, options=LoadOptions(probe_requests=0))
        cli = runner.invoke(app, ["bench", "--url", srv.url, "--num-requests", "2", "--osl", "8"])
    assert m.failed_requests == m.num_requests == 4
    _fails_in_one_line(cli, 4)


def test_bench_ignores_a_tokenizer_that_answers_non_integers() -> None:
    from tests._fake_openai import FakeServerConfig, running_fake_server
    from tuner.bench.loadgen import Endpoint, LoadOptions, run_workload

    cfg = FakeServerConfig(ttft_s=0.001, itl_s=0.001, tokenize_tokens=["a", 1.5, None] * 100)
    with running_fake_server(cfg) as srv:
        m = run_workload(Endpoint(srv.url), Workload(input_tokens=8, output_tokens=4,
                         concurrency=1, num_requests=2), options=LoadOptions())  # fmt: skip
    assert m.failed_requests == 0 and m.extra["input_tokens_exact"] is False


@pytest.mark.parametrize("url", ["ftp://x", "http://", "http://[::1", "localhost:8000", ""])
def test_malformed_bench_urls_are_bad_input(url: str) -> None:
    _fails_in_one_line(runner.invoke(app, ["bench", "--url", url]))


# -- 6/7/8. files: encodings, aliases, nesting, folders, long names --------------------------------

BOMB = """a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
ttft_ms: [*e,*e,*e,*e,*e,*e,*e,*e,*e]
"""


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"name: \xff\xfe\n", "not UTF-8"),
        (BOMB.encode(), "aliases"),
        (b"ttft_ms: " + b"[" * 3000 + b"]" * 3000, "nested deeper"),
        (b"ttft_ms: " + b"[" * 40 + b"]" * 40, "nested deeper"),
    ],
)
def test_bad_yaml_files_are_one_bounded_line(content: bytes, needle: str, tmp_path: Path) -> None:
    path = tmp_path / "sla.yaml"
    path.write_bytes(content)
    line = _fails_in_one_line(runner.invoke(app, ["validate", str(path), "--kind", "sla"]))
    assert needle in line and len(line) < 1000


def test_a_non_utf8_run_yaml_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_bytes(b"model: \xff\n")
    _fails_in_one_line(runner.invoke(app, ["tune", "--resume", str(tmp_path)]))


@pytest.mark.parametrize(
    "make",
    [
        lambda d: (d / "m" / "config.json").mkdir(parents=True) or d / "m" / "config.json",
        lambda d: (d / "c.json").write_text('{"text_config": [1]}') and d / "c.json",
        lambda d: (d / "c.json").write_bytes(b'{"a": "\xff"}') and d / "c.json",
        lambda d: (d / "c.json").write_text("[" * 100000 + "]" * 100000) and d / "c.json",
        lambda d: (d / "c.json").write_text("[1, 2]") and d / "c.json",
    ],
)
def test_bad_hf_configs_are_one_line(make, tmp_path: Path) -> None:
    path = make(tmp_path)
    _fails_in_one_line(runner.invoke(app, ["show", "model", str(path)]))


@pytest.mark.parametrize("kind", ["model", "gpu", "sla", "space"])
def test_names_longer_than_the_filesystem_allows_are_unknown_names(kind: str) -> None:
    for name in ("x" * 300, "y" * 300 + ".yaml", "z" * 300 + ".json", "a\x00b"):
        line = _fails_in_one_line(runner.invoke(app, ["show", kind, name]))
        assert len(line) < 2000


def test_echo_is_bounded_for_huge_and_self_referencing_values() -> None:
    big: list[object] = [["lol"] * 10**6] * 10**6
    big.append(big)
    assert len(echo(big)) <= 80 and len(one_line("x\n" * 10**6)) <= 1500


def test_out_or_run_dir_naming_a_file_is_bad_input(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("")
    base = [*TUNE, "--model", "llama-3.2-1b", "--trials", "2"]
    _fails_in_one_line(runner.invoke(app, [*base, "--out", str(file)]))
    _fails_in_one_line(runner.invoke(app, [*base, "--run-dir", str(file)]))
    _fails_in_one_line(runner.invoke(app, [*base, "--out", str(file / "sub")]))


def test_journal_storage_naming_a_folder_is_bad_input(tmp_path: Path) -> None:
    argv = [*TUNE, "--model", "llama-3.2-1b", "--trials", "2", "--storage",
            f"journal:{tmp_path}", "--run-dir", str(tmp_path / "r")]  # fmt: skip
    _fails_in_one_line(runner.invoke(app, argv))
    assert not (tmp_path / "r").exists()  # a failed tune leaves no folder


def test_a_space_validate_accepts_is_one_tune_accepts(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("quantization: [bf16]\nkv_dtype: [auto]\nmax_num_batched_tokens: [8192]\n"
                     "max_num_seqs: [0]\n")  # fmt: skip
    _fails_in_one_line(runner.invoke(app, ["validate", str(space), "--kind", "space"]))
    space.write_text(space.read_text().replace("[0]", "{low: 1, high: 1000000000000}"))
    assert runner.invoke(app, ["validate", str(space), "--kind", "space"]).exit_code == 0
    argv = [*TUNE, "--model", "llama-3.2-1b", "--trials", "3", "--sampler", "grid", "--space",
            str(space), "--run-dir", str(tmp_path / "r")]  # fmt: skip
    result = runner.invoke(app, argv)
    assert result.exit_code in (0, 3) and "Traceback" not in result.output


def test_grid_values_of_a_huge_range_are_few_and_cheap() -> None:
    values = grid_values(IntRange(low=1, high=10**15))
    assert len(values) == 8 and values[0] == 1 and values[-1] == 10**15


def test_corrupted_trial_data_is_a_failed_trial_not_a_crash(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    argv = [*TUNE, "--model", "llama-3.2-1b", "--trials", "6", "--run-dir", str(run),
            "--storage", f"sqlite:///{run / 'study.db'}"]  # fmt: skip
    assert runner.invoke(app, argv).exit_code == 0
    with sqlite3.connect(run / "study.db") as con:
        con.execute("update trial_user_attributes set value_json = '\"garbage\"' "
                    "where key in ('metrics', 'config')")  # fmt: skip
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 3 and "Traceback" not in result.output
    states = {r["state"] for r in _rows(run / "trials.csv")}
    assert "failed" in states and "complete" not in states
    resumed = runner.invoke(app, ["tune", "--resume", str(run), "--trials", "9"])
    assert resumed.exit_code in (0, 3) and "Traceback" not in resumed.output
    with sqlite3.connect(run / "study.db") as con:
        con.execute("update trial_params set distribution_json = '{bad'")
    for argv in (["report", str(run)], ["export", str(run), "--trial", "0"],
                 ["tune", "--resume", str(run), "--trials", "12"]):  # fmt: skip
        assert "corrupted" in _fails_in_one_line(runner.invoke(app, argv))


# -- 9. exit codes of bench and measuring backends -----------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [["--concurrency", "0"], ["--timeout", "0"], ["--timeout", "-1"], ["--timeout", "nan"],
     ["--ttft-ms", "-5"], ["--tpot-ms", "inf"], ["--rate", "0"], ["--num-requests", "0"]],
)  # fmt: skip
def test_bench_rejects_out_of_range_flags(flags: list[str]) -> None:
    _fails_in_one_line(runner.invoke(app, ["bench", "--url", "http://127.0.0.1:9", *flags]))


def test_a_missing_model_path_is_bad_input_and_leaves_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [*TUNE, "--model", "llama-3.2-1b", "--backend", "torch", "--model-path",
            str(tmp_path / "nope"), "--out", str(out)]  # fmt: skip
    _fails_in_one_line(runner.invoke(app, argv))
    assert list(out.iterdir()) == []
    predict = ["predict", "--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--backend", "torch",
               "--model-path", str(tmp_path / "nope")]  # fmt: skip
    _fails_in_one_line(runner.invoke(app, predict))


# -- 10. interruptions, and folders that are not runs --------------------------------------------


@pytest.mark.parametrize("cmd", [["report"], ["export", "--trial", "0"]])
def test_report_and_export_never_create_a_study(cmd: list[str], tmp_path: Path) -> None:
    run = tmp_path / "r"
    argv = [*TUNE, "--model", "llama-3.2-1b", "--trials", "2", "--run-dir", str(run)]
    assert runner.invoke(app, argv).exit_code in (0, 3)
    (run / "study.journal").unlink()
    line = _fails_in_one_line(runner.invoke(app, [cmd[0], str(run), *cmd[1:]]))
    assert "study.journal" in line and not (run / "study.journal").exists()


def _interrupt_after(n: int):
    def stop(study: optuna.Study, trial: object) -> None:
        if len(study.trials) >= n:
            raise KeyboardInterrupt

    return stop


def test_ctrl_c_keeps_finished_trials_in_one_line(tmp_path: Path, monkeypatch) -> None:
    from tuner.cli import tune_cmd

    real = tune_cmd.tune
    monkeypatch.setattr(tune_cmd, "tune", lambda *a, **k: real(
        *a, **{**k, "callbacks": [*k["callbacks"], _interrupt_after(4)]}))  # fmt: skip
    run = tmp_path / "r"
    result = runner.invoke(app, [*TUNE, "--model", "llama-3.2-1b", "--trials", "50",
                                 "--run-dir", str(run)])  # fmt: skip
    line = _fails_in_one_line(result, 130)
    assert "4 finished trials are kept" in line and "--resume" in line
    assert len(_rows(run / "trials.csv")) == 4


def test_second_ctrl_c_while_writing_leaves_no_stale_outputs(tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "r"
    argv = [*TUNE, "--model", "llama-3.2-1b", "--trials", "4", "--run-dir", str(run)]
    assert runner.invoke(app, argv).exit_code == 0
    from tuner.run import folder

    def interrupted(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(folder, "render_html", interrupted)
    result = runner.invoke(app, ["tune", "--resume", str(run), "--trials", "6"])
    line = _fails_in_one_line(result, 130)
    assert "incomplete" in line and "tuner report" in line
    assert not (run / "report.html").exists()
    monkeypatch.undo()
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    assert len(_rows(run / "trials.csv")) == 6


# -- 11. output survives a pipe ------------------------------------------------------------------


LISTS = [("profiles", "hardware_profiles"), ("models", "models"), ("spaces", "search_spaces"),
         ("slas", "slas")]  # fmt: skip


@pytest.mark.parametrize(("cmd", "kind"), LISTS)
def test_list_commands_print_whole_rows_off_a_terminal_and_json(cmd: str, kind: str) -> None:
    result = runner.invoke(app, [cmd])
    assert result.exit_code == 0
    for name in catalog.list_names(kind):
        assert any(f" {name} " in line for line in result.stdout.splitlines()), name
    docs = json.loads(runner.invoke(app, [cmd, "--json"]).stdout)
    assert [d["name"] for d in docs] == catalog.list_names(kind)


def test_tune_progress_is_plain_lines_off_a_terminal(tmp_path: Path) -> None:
    result = runner.invoke(app, [*TUNE, "--model", "llama-3.2-1b", "--trials", "3",
                                 "--run-dir", str(tmp_path / "r")])  # fmt: skip
    assert result.exit_code == 0
    assert sum(line.startswith("trial ") for line in result.stdout.splitlines()) == 3


class _InterruptedBackend:
    """A backend whose third evaluation is interrupted by Ctrl-C (inside the Optuna objective)."""

    name = "fake"

    def __init__(self) -> None:
        self.inner, self.calls = FakeBackend(), 0

    def evaluate(self, config, ctx):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == 3:
            raise KeyboardInterrupt
        return self.inner.evaluate(config, ctx)


def test_ctrl_c_inside_a_trial_logs_no_optuna_traceback(tmp_path: Path, monkeypatch) -> None:
    import logging

    from tuner.errors import InterruptedRunError
    from tuner.run import tune as tune_module
    from tuner.run_spec import load_run_spec

    run = tmp_path / "r"
    argv = [*TUNE, "--model", "llama-3.2-1b", "--trials", "1", "--run-dir", str(run)]
    assert runner.invoke(app, argv).exit_code in (0, 3)
    spec = load_run_spec(run).model_copy(update={"trials": 30})
    monkeypatch.setattr(tune_module, "get_backend", lambda name, **o: _InterruptedBackend())
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("optuna").addHandler(handler)
    try:
        with pytest.raises(InterruptedRunError, match="finished trials are kept"):
            tune_module.tune(spec, run, resume=True)
    finally:
        logging.getLogger("optuna").removeHandler(handler)
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records]


# -- 12. measuring backends default --gpu to the local device --------------------------------------


def test_measuring_backends_default_gpu_to_the_nvml_device(monkeypatch) -> None:
    from tuner import detect

    h200 = detect.DetectedGPU(index=0, name="NVIDIA H200", memory_gib=139.8, profile="h200-sxm")
    monkeypatch.setattr(detect, "detect_gpus", lambda: [h200])
    name, note = detect.local_gpu_profile("torch")
    assert name == "h200-sxm" and "NVIDIA H200" in note
    line = _fails_in_one_line(runner.invoke(app, ["tune", "--model", "llama-3.2-1b"]))
    assert "--gpu is required with --backend sim" in line


def test_without_a_gpu_measuring_backends_measure_the_cpu_and_say_so(
    monkeypatch, tmp_path: Path
) -> None:
    import os

    from tuner import detect
    from tuner.specs import Architecture, GPUProfile

    monkeypatch.setattr(detect, "detect_gpus", lambda: "no NVIDIA driver found")
    profile, note = detect.local_gpu_profile("vllm")
    assert isinstance(profile, GPUProfile) and profile.architecture is Architecture.cpu
    assert "no NVIDIA GPU detected" in note and "measuring on the CPU" in note
    assert profile.memory_bandwidth_gbps > 0.5 and profile.fp16_tflops > 1e-4
    total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    assert abs(profile.memory_gib - total_gib) < 0.01
    assert "measured on this host" in profile.source and profile.tdp_w == 0
    # The profile is a file every command accepts as --gpu FILE.
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(profile.model_dump(mode="json")))
    result = runner.invoke(app, ["validate", str(path), "--kind", "gpu"])
    assert result.exit_code == 0, result.output


def test_two_tunes_in_the_same_second_into_one_out_get_two_folders(
    tmp_path: Path, monkeypatch
) -> None:
    from datetime import datetime

    from tuner.cli import tune_cmd

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime(2026, 1, 1, 12, 0, 0)

    monkeypatch.setattr(tune_cmd, "datetime", Frozen)
    out = tmp_path / "out"
    for _ in range(2):
        argv = [*TUNE, "--model", "llama-3.2-1b", "--trials", "2", "--out", str(out)]
        assert runner.invoke(app, argv).exit_code in (0, 3)
    runs = sorted(p.name for p in out.iterdir())
    assert len(runs) == 2 and runs[1] == runs[0] + "-2"
    assert all(len(_rows(out / r / "trials.csv")) == 2 for r in runs)
