"""A full disk (or a kill) mid-append leaves a torn last line in a journal: the next append cuts
it off, keeping every complete record, so report and resume keep every finished trial."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from tuner.cli import app
from tuner.errors import BackendError
from tuner.screen.journal import JOURNAL_FILE, append_measured, read_measured
from tuner.screen.variant import ConfirmedVariant
from tuner.search.storage import UnsyncedJournal, drop_torn_tail, make_storage
from tuner.specs import EngineConfig

runner = CliRunner()
SMALL = ["--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--sla", "chat"]


def _finished(run: Path) -> int:
    storage = make_storage(f"journal:{run / 'study.journal'}")
    study = optuna.load_study(study_name="tuner", storage=storage)
    return len(study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED)))


def _tear(journal: Path) -> None:
    """Append half of a record with no newline, as a write cut short by a full disk leaves it."""
    last = journal.read_bytes().splitlines()[-1]
    with journal.open("ab") as fh:
        fh.write(last[: len(last) // 2])


def test_resume_repairs_a_torn_journal_and_report_and_resume_keep_every_trial(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    first = runner.invoke(app, ["tune", *SMALL, "--trials", "4", "--run-dir", str(run)])
    assert first.exit_code == 0, first.output
    journal = run / "study.journal"
    complete = journal.read_bytes()
    _tear(journal)

    report = runner.invoke(app, ["report", str(run)])
    assert report.exit_code == 0, report.output
    assert "rebuilt 4 trials" in report.output

    resumed = runner.invoke(app, ["tune", "--resume", str(run), "--trials", "6"])
    assert resumed.exit_code == 0, resumed.output
    assert journal.read_bytes().startswith(complete)  # every complete record kept, in place
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())
    assert _finished(run) == 6

    again = runner.invoke(app, ["report", str(run)])
    assert again.exit_code == 0, again.output
    assert "rebuilt 6 trials" in again.output
    more = runner.invoke(app, ["tune", "--resume", str(run), "--trials", "7"])
    assert more.exit_code == 0, more.output
    assert _finished(run) == 7


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (b"", b""),
        (b'{"a":1}\n', b'{"a":1}\n'),
        (b'{"a":1}\n{"b":', b'{"a":1}\n'),
        (b'{"tor', b""),
        (b'{"a":1}\n' + b"x" * 200_000, b'{"a":1}\n'),  # a tail longer than one read back
    ],
)
def test_drop_torn_tail_keeps_every_complete_line(text: bytes, kept: bytes, tmp_path: Path) -> None:
    path = tmp_path / "j"
    path.write_bytes(text)
    assert drop_torn_tail(path) == len(text) - len(kept)
    assert path.read_bytes() == kept


class _DiskFull:
    """A file whose write stores half the bytes, then fails as a full disk does."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def __enter__(self) -> _DiskFull:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fh.close()

    def fileno(self) -> int:
        return int(self.fh.fileno())

    def write(self, data: bytes) -> int:
        self.fh.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.unit
def test_a_failed_append_cuts_what_it_wrote_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "study.journal"
    journal = UnsyncedJournal(str(path))
    journal.append_logs([{"op": 0}, {"op": 1}])
    before = path.read_bytes()
    real_open = Path.open

    def full_disk(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = real_open(self, mode, *args, **kwargs)
        return _DiskFull(fh) if self == path and mode == "ab" else fh

    monkeypatch.setattr(Path, "open", full_disk)
    with pytest.raises(BackendError, match="cannot append to the study journal"):
        journal.append_logs([{"op": 2, "payload": "x" * 100}])
    monkeypatch.undo()
    assert path.read_bytes() == before
    journal.append_logs([{"op": 3}])
    assert [json.loads(line)["op"] for line in path.read_text().splitlines()] == [0, 1, 3]


@pytest.mark.unit
def test_a_screen_journal_append_after_a_torn_line_keeps_it_readable(tmp_path: Path) -> None:
    first = ConfirmedVariant(
        role="baseline", predicted_rank=None, screen_trial=None, config=EngineConfig()
    )
    second = first.model_copy(update={"role": "candidate", "config": EngineConfig(max_num_seqs=64)})
    append_measured(tmp_path, first)
    with (tmp_path / JOURNAL_FILE).open("a") as fh:
        fh.write('{"role": "candi')  # a kill or a full disk in the middle of a write
    append_measured(tmp_path, second)
    assert list(read_measured(tmp_path).values()) == [first, second]
