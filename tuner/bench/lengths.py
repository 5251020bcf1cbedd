"""Read empirical (input, output) token-length pairs for `--lengths FILE` (CSV or JSONL).

CSV: a header naming an input column (`input_tokens`, `input`, `isl`, `prompt_tokens`) and an
output column (`output_tokens`, `output`, `osl`, `completion_tokens`), one request per row.
JSONL: one object per line with the same keys. Lengths must be positive integers. Any problem
raises `InputError` with one line naming the file, the line and what is allowed. The pairs are
sampled with the workload seed by `bench.arrivals.sample_lengths`.
"""

from __future__ import annotations

import csv
import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from tuner.errors import InputError

__all__ = ["load_length_pairs", "workload_length_pairs"]

INPUT_KEYS = ("input_tokens", "input", "isl", "prompt_tokens")
OUTPUT_KEYS = ("output_tokens", "output", "osl", "completion_tokens")
_ALLOWED = (
    "expected CSV with a header or JSONL objects holding an input length "
    f"({'/'.join(INPUT_KEYS)}) and an output length ({'/'.join(OUTPUT_KEYS)}), positive integers"
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
    if value is None or not number.is_integer() or number < 1:
        raise InputError(f"{where}: length {value!r} is not a positive integer; {_ALLOWED}")
    return int(number)


def _records(path: Path) -> list[tuple[int, dict[str, object]]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        out = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not JSON ({exc.msg}); {_ALLOWED}") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}:{lineno}: not a JSON object; {_ALLOWED}")
            out.append((lineno, record))
        return out
    reader = csv.DictReader(text.splitlines())
    fields = reader.fieldnames or []
    if not any(k in fields for k in INPUT_KEYS) or not any(k in fields for k in OUTPUT_KEYS):
        raise InputError(f"{path}: header {fields} lacks a length column; {_ALLOWED}")
    return [(i, dict(row)) for i, row in enumerate(reader, start=2)]


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
    except OSError as exc:
        raise InputError(f"--lengths {file}: cannot read ({exc.strerror})") from None
    return _cached(str(file), mtime)


def workload_length_pairs(lengths_file: str | None) -> np.ndarray | None:
    """The pairs of a workload's `lengths_file`, or None when it has none."""
    return None if lengths_file is None else load_length_pairs(lengths_file)
