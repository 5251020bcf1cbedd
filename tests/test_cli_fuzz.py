"""Fuzz the CLI in-process with hypothesis: flags and file contents of every class of issue 11.

Whatever the input, a command ends with a documented exit code (0 ok, 2 bad input, 3 nothing
meets the SLA, 4 backend could not run, 130 interrupted), no traceback, exactly one `error:`
line on failure (click usage errors included) and no file outside its output folder. The run is
bounded by a wall-clock budget, so CI time stays fixed however slow the machine.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner import catalog
from tuner.cli import app
from tuner.specs import SLA, ModelSpec, SearchSpace

ALLOWED_EXIT = {0, 2, 3, 4, 130}
# Wall-clock cap of the whole fuzz run (examples past it are skipped) and example count; raise
# both through the environment for a deeper local run.
BUDGET_S = float(os.environ.get("TUNER_FUZZ_BUDGET_S", "25"))
EXAMPLES = int(os.environ.get("TUNER_FUZZ_EXAMPLES", "400"))
_started: list[float] = []
runner = CliRunner()

BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b]\n"
WORDS = ["[/]", "x[v2]", "[bold]", "", " ", "-1", "0", "nan", "inf", "1e309", "x" * 300,
         "a\x00b", "../..", "/", "é", "llama-3.2-1b", "h200-sxm", "chat", "default"]  # fmt: skip

FIELDS = sorted({*SLA.model_fields, *SearchSpace.model_fields, *ModelSpec.model_fields,
                 "concurrency", "input_tokens", "rate_rps", "text_config", "model"})  # fmt: skip

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(WORDS),
    st.text(max_size=12),
)  # fmt: skip
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4)
), max_leaves=12)  # fmt: skip


def _dump(data: object) -> bytes:
    try:
        return yaml.safe_dump(data).encode()
    except (yaml.YAMLError, ValueError):
        return b"{}"


file_contents = st.one_of(
    st.binary(max_size=120),
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=8).map(_dump),
    st.just(BOMB.encode()),
    st.integers(20, 5000).map(lambda n: b"ttft_ms: " + b"[" * n + b"]" * n),
    st.just(b"name: \xff\xfe\x00\n"),
    st.sampled_from([p.read_bytes() for p in sorted(catalog.data_dir("slas").glob("*.yaml"))]),
)
words = st.one_of(st.sampled_from(WORDS), st.text(max_size=10))
small_ints = st.sampled_from(["-1", "0", "1", "2", "3", "x", "1.5", "99999999999999999999"])

# Flags with the value strategies the fuzz gives them (FILE = a fuzzed file's path).
TUNE_FLAGS = {
    "--model": st.sampled_from(["llama-3.2-1b", "FILE", "FILE.json"]) | words,
    "--gpu": st.sampled_from(["h200-sxm", "FILE"]) | words,
    "--sla": st.sampled_from(["chat", "FILE"]) | words,
    "--space": st.sampled_from(["default", "FILE"]) | words,
    "--workload": st.just("FILE"),
    "--trials": small_ints, "--timeout": small_ints | words, "--ttft-ms": small_ints,
    "--num-gpus": small_ints, "--isl": small_ints, "--concurrency": small_ints,
    "--sampler": st.sampled_from(["tpe", "grid", "random", "x"]), "--backend": words,
    "--model-path": words, "--run-dir": st.sampled_from(["OUT/r", "FILE", "OUT"]),
    "--resume": st.sampled_from(["OUT", "FILE", "OUT/r"]), "--config": st.just("FILE"),
    "--storage": st.sampled_from(["journal:OUT", "journal:OUT/j.log", "sqlite:///OUT/s.db"]),
    "--out": st.sampled_from(["OUT", "FILE"]),
}  # fmt: skip
BENCH_FLAGS = {
    "--url": st.sampled_from(["http://127.0.0.1:9", "ftp://x", "http://", "http://[::1"])
    | words,
    "--concurrency": small_ints, "--timeout": small_ints, "--ttft-ms": small_ints,
    "--rate": small_ints, "--num-requests": small_ints, "--api": words, "--sla": words,
}  # fmt: skip
PREDICT_FLAGS = {
    "--model": TUNE_FLAGS["--model"], "--gpu": TUNE_FLAGS["--gpu"], "--tp": small_ints,
    "--quant": st.sampled_from(["bf16", "int4-awq", "x"]), "--isl": small_ints,
    "--osl": small_ints, "--num-requests": st.sampled_from(["1", "5", "0"]),
    "--spec-tokens": small_ints, "--draft-model": words, "--backend": words,
}  # fmt: skip


def _flags(table: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[str]]:
    pairs = st.lists(st.sampled_from(sorted(table)), max_size=3, unique=True).flatmap(
        lambda names: st.tuples(*(table[n].map(lambda v, n=n: [n, v]) for n in names))
    )
    return pairs.map(lambda ps: [x for p in ps for x in p])


TUNE_BASE = ["--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--trials", "2", "--out", "OUT"]
PREDICT_BASE = ["--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--num-requests", "4"]
kinds = st.sampled_from(["model", "gpu", "sla", "space", "x"])
commands = st.one_of(
    st.tuples(st.just(["show"]), kinds.map(lambda k: [k]), (words | st.just("FILE")).map(
        lambda w: [w])).map(lambda t: [x for p in t for x in p]),
    kinds.map(lambda k: ["validate", "FILE", "--kind", k]),
    # A valid base first (a later flag overrides it), so many runs get past validation.
    _flags(TUNE_FLAGS).map(lambda f: ["tune", *TUNE_BASE, *f]),
    _flags(PREDICT_FLAGS).map(lambda f: ["predict", *PREDICT_BASE, *f]),
    _flags(BENCH_FLAGS).map(lambda f: ["bench", "--url", "http://127.0.0.1:9", *f]),
    st.sampled_from([["report", "OUT"], ["report", "FILE"], ["export", "OUT", "--trial", "0"],
                     ["export", "OUT/r", "--trial", "x"]]),  # fmt: skip
    st.tuples(st.sampled_from(["profiles", "models", "spaces", "slas", "detect", "nope"]),
              st.sampled_from([[], ["--json"], ["--bogus"], ["x"]])).map(lambda t: [t[0], *t[1]]),
)  # fmt: skip


@contextmanager
def _sandbox() -> Iterator[Path]:
    before = Path.cwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(before)


def _substitute(arg: str, names: dict[str, str]) -> str:
    for placeholder, value in names.items():  # FILE.json before FILE (dict order)
        arg = arg.replace(placeholder, value)
    return arg


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(argv=commands, content=file_contents)
def test_any_input_ends_in_a_documented_exit_code_and_one_line(
    argv: list[str], content: bytes
) -> None:
    if not _started:
        _started.append(time.monotonic())
    if time.monotonic() - _started[0] > BUDGET_S:
        return  # bounded CI time: the examples so far are the run
    with _sandbox() as root:
        (root / "in").mkdir()
        (root / "OUT").mkdir()
        inputs = {"FILE.json": root / "in" / "config.json", "FILE": root / "in" / "file.yaml"}
        for path in inputs.values():
            path.write_bytes(content)
        names = {"FILE.json": str(inputs["FILE.json"]), "FILE": str(inputs["FILE"]),
                 "OUT": str(root / "OUT")}  # fmt: skip
        args = [_substitute(a, names) for a in argv]
        result = runner.invoke(app, args)
        out = result.output
        assert result.exit_code in ALLOWED_EXIT, (args, result.exit_code, out[-2000:])
        assert "Traceback" not in out, (args, out[-2000:])
        if result.exit_code != 0:
            lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("error:")]
            assert len(errors) == 1 and lines[0].startswith("error:"), (args, result.stderr)
        # Nothing written outside the output folder (the inputs are the test's own files).
        stray = {f for f in _files(root) if not f.startswith(("OUT", "in"))}
        assert not stray, (args, stray)
