"""Read empirical (input, output) token-length pairs for `--lengths FILE` (CSV or JSONL).

CSV: a header naming an input column (`input_tokens`, `input`, `isl`, `prompt_tokens`) and an
output column (`output_tokens`, `output`, `osl`, `completion_tokens`), one request per row.
JSONL: one object per line with the same keys. Lengths must be integers in 1..MAX_REQUEST_TOKENS;
the file must be a regular file of at most MAX_LENGTHS_FILE_BYTES (a FIFO or /dev/zero never
ends). Any problem raises `InputError` with one line naming the file, the line and what is
allowed. The pairs are sampled with the workload seed by `bench.arrivals.sample_lengths`.
"""

from __future__ import annotations

import csv
import json
import os
import stat
from functools import lru_cache
from pathlib import Path

import numpy as np

from tuner.errors import InputError, echo
from tuner.specs import MAX_REQUEST_TOKENS

__all__ = [
    "MAX_LENGTHS_FILE_BYTES",
    "MAX_LENGTHS_LINE_CHARS",
    "load_length_pairs",
    "workload_length_pairs",
]

# A million JSONL rows of a few dozen bytes: far more pairs than a trace needs, far less memory
# than would hurt. One row of two lengths is short; a longer line is not a row of ours (and a
# deeply nested one would exhaust the JSON parser's recursion).
MAX_LENGTHS_FILE_BYTES = 64 * 1024 * 1024
MAX_LENGTHS_LINE_CHARS = 4096

INPUT_KEYS = ("input_tokens", "input", "isl", "prompt_tokens")
OUTPUT_KEYS = ("output_tokens", "output", "osl", "completion_tokens")
_ALLOWED = (
    "expected CSV with a header or JSONL objects holding an input length "
    f"({'/'.join(INPUT_KEYS)}) and an output length ({'/'.join(OUTPUT_KEYS)}), integers in "
    f"1..{MAX_REQUEST_TOKENS}"
)


def _pick(record: dict[str, object], keys: tuple[str, ...]) -> object:
    for key in keys:
        if key in record:
            return record[key]
    return None


def _length(value: object, where: str) -> int:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = float("nan")  # never an integer: fails the check below
    if value is None or not number.is_integer() or not 1 <= number <= MAX_REQUEST_TOKENS:
        raise InputError(f"{where}: length {echo(value)} is out of range; {_ALLOWED}")
    return int(number)


def _read_bounded(path: Path) -> str:
    """The text of `path`, a regular file of at most MAX_LENGTHS_FILE_BYTES; InputError else."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"--lengths {path}: cannot read ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "is a folder" if stat.S_ISDIR(mode) else "not a regular file (a device or a pipe)"
        raise InputError(f"--lengths {path}: {what}; {_ALLOWED}")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_LENGTHS_FILE_BYTES + 1)
    if len(data) > MAX_LENGTHS_FILE_BYTES:
        raise InputError(
            f"--lengths {path}: larger than {MAX_LENGTHS_FILE_BYTES // 2**20} MiB; sample it down"
        )
    return data.decode("utf-8", errors="replace")


def _records(path: Path) -> list[tuple[int, dict[str, object]]]:
    text = _read_bounded(path)
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        out = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            if len(line) > MAX_LENGTHS_LINE_CHARS:
                raise InputError(
                    f"{path}:{lineno}: line longer than {MAX_LENGTHS_LINE_CHARS} characters; "
                    f"{_ALLOWED}"
                )
            try:
                record = json.loads(line)
            except RecursionError:
                raise InputError(f"{path}:{lineno}: nested too deeply; {_ALLOWED}") from None
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not JSON ({exc.msg}); {_ALLOWED}") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}:{lineno}: not a JSON object; {_ALLOWED}")
            out.append((lineno, record))
        return out
    reader = csv.DictReader(text.splitlines())
    try:
        fields = reader.fieldnames or []
        if not any(k in fields for k in INPUT_KEYS) or not any(k in fields for k in OUTPUT_KEYS):
            raise InputError(f"{path}: header {echo(fields)} lacks a length column; {_ALLOWED}")
        return [(i, dict(row)) for i, row in enumerate(reader, start=2)]
    except csv.Error as exc:  # a field over csv's size limit, a NUL byte
        raise InputError(f"{path}:{reader.line_num}: not CSV ({exc}); {_ALLOWED}") from None


@lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int) -> np.ndarray:
    file = Path(path)
    pairs = []
    for lineno, record in _records(file):
        where = f"{file}:{lineno}"
        pairs.append(
            (
                _length(_pick(record, INPUT_KEYS), where),
                _length(_pick(record, OUTPUT_KEYS), where),
            )
        )
    if not pairs:
        raise InputError(f"{file}: no length pairs; {_ALLOWED}")
    arr = np.asarray(pairs, dtype=np.int64)
    arr.flags.writeable = False
    return arr


def load_length_pairs(path: str | Path) -> np.ndarray:
    """The (n x 2) int64 array of (input, output) lengths in `path`; InputError if malformed."""
    file = Path(path)
    try:
        mtime = file.stat().st_mtime_ns
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise InputError(
            f"--lengths {file}: cannot read ({getattr(exc, 'strerror', exc)})"
        ) from None
    return _cached(str(file), mtime)


def workload_length_pairs(lengths_file: str | None) -> np.ndarray | None:
    """The pairs of a workload's `lengths_file`, or None when it has none."""
    return None if lengths_file is None else load_length_pairs(lengths_file)
