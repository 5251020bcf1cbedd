"""Read a request trace for `--trace FILE`: Mooncake JSONL, or a plain CSV/JSONL.

Mooncake (kvcache-ai/Mooncake, `traces/`; also what NVIDIA AIPerf and Dynamo replay): one JSON
object per line, `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}`,
`hash_ids` naming the prompt's 512-token blocks (equal ids, equal content). Plain: CSV with a
header, or JSONL objects, holding a send time (`timestamp` in ms, or `timestamp_s`), an input
length (`input`, `input_tokens`, `input_length`), an output length (`output`, `output_tokens`,
`output_length`), and optionally `session` and `turn` (a turn's prompt then starts with its
session's history, `bench.session_blocks`) or `hash_ids`.

The file streams line by line (never read whole, never kept as text) and is bounded: a regular
file of UTF-8 text, at most MAX_TRACE_LINES requests, MAX_TRACE_LINE_BYTES per line, lengths in
1..MAX_TRACE_TOKENS, times sorted and within MAX_TRACE_SPAN_MS. Anything else raises one
`InputError` line naming the file, the line, the field and what is allowed.
"""

from __future__ import annotations

import csv
import json
import math
import os
import stat
from array import array
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tuner.bench.session_blocks import SessionBlocks
from tuner.bench.trace import MOONCAKE_BLOCK_TOKENS, BlockHashes, Trace
from tuner.errors import InputError, echo

__all__ = [
    "MAX_TRACE_LINES",
    "MAX_TRACE_LINE_BYTES",
    "MAX_TRACE_SPAN_MS",
    "MAX_TRACE_TOKENS",
    "load_trace",
]

# A replay simulates every request: 100k is hours of production traffic at tens of req/s and
# about what the simulator replays in seconds. More lines: sample the trace down.
MAX_TRACE_LINES = 100_000
# A Mooncake line of a 1M-token prompt holds 2048 hash ids, about 16 KB.
MAX_TRACE_LINE_BYTES = 65_536
# Above any model's context in 2026 (1M tokens); a longer "length" is a corrupt field.
MAX_TRACE_TOKENS = 1_048_576
# A year of traffic in milliseconds.
MAX_TRACE_SPAN_MS = 366 * 86_400 * 1000.0
_MAX_HASH_ID = 2**62

TIME_KEYS = {"timestamp": 1e-3, "timestamp_s": 1.0}  # key -> seconds per unit
INPUT_KEYS = ("input_length", "input_tokens", "input")
OUTPUT_KEYS = ("output_length", "output_tokens", "output")
OPTIONAL_KEYS = ("hash_ids", "session", "turn")
_KNOWN = set(TIME_KEYS) | set(INPUT_KEYS) | set(OUTPUT_KEYS) | set(OPTIONAL_KEYS)
_ALLOWED = (
    "expected Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids) or CSV/JSONL "
    "with timestamp (ms) or timestamp_s, input, output and optional session, turn"
)


def _fail(where: str, what: str) -> InputError:
    return InputError(f"{where}: {what}; {_ALLOWED}")


def _open(path: Path) -> BinaryIO:
    """`path` opened for reading if it is a regular file; InputError else."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise InputError(f"--trace {path}: cannot read ({getattr(exc, 'strerror', exc)})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "is a folder" if stat.S_ISDIR(mode) else "not a regular file (a device or a pipe)"
        raise _fail(f"--trace {path}", what)
    return os.fdopen(fd, "rb")


def _lines(path: Path, f: BinaryIO) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line, bounded in length and count, UTF-8."""
    lineno = rows = 0
    while raw := f.readline(MAX_TRACE_LINE_BYTES + 1):
        lineno += 1
        if len(raw) > MAX_TRACE_LINE_BYTES:
            raise _fail(f"{path}:{lineno}", f"line longer than {MAX_TRACE_LINE_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(f"{path}:{lineno}", f"not UTF-8 text (byte {exc.start})") from None
        if not text.strip():
            continue
        rows += 1
        if rows > MAX_TRACE_LINES:
            raise _fail(f"{path}:{lineno}", f"more than {MAX_TRACE_LINES} requests; sample it down")
        yield lineno, text


def _json_records(path: Path, f: BinaryIO) -> Iterator[tuple[int, dict[str, object]]]:
    for lineno, text in _lines(path, f):
        try:
            record = json.loads(text)
        except RecursionError:
            raise _fail(f"{path}:{lineno}", "nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise _fail(f"{path}:{lineno}", f"not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise _fail(f"{path}:{lineno}", "not a JSON object")
        yield lineno, record


def _csv_records(path: Path, f: BinaryIO) -> Iterator[tuple[int, dict[str, object]]]:
    numbered = _lines(path, f)
    where = {"line": 0}

    def texts() -> Iterator[str]:
        for lineno, text in numbered:
            where["line"] = lineno
            yield text

    reader = csv.reader(texts())
    try:
        header = [h.strip() for h in next(reader, [])]
        if "hash_ids" in header:
            raise _fail(f"{path}:{where['line']}", "hash_ids: only in JSONL (a list per line)")
        for row in reader:
            if len(row) != len(header):
                raise _fail(
                    f"{path}:{where['line']}", f"{len(row)} fields, header has {len(header)}"
                )
            yield where["line"], dict(zip(header, row, strict=True))
    except csv.Error as exc:  # a NUL byte, an unterminated quote
        raise _fail(f"{path}:{where['line']}", f"not CSV ({exc})") from None


def _number(value: object, where: str, field: str) -> float:
    if isinstance(value, bool) or value is None:
        raise _fail(where, f"{field}: {echo(value)} is not a number")
    try:
        number = float(str(value).strip())
    except ValueError:
        raise _fail(where, f"{field}: {echo(value)} is not a number") from None
    if not math.isfinite(number):
        raise _fail(where, f"{field}: {echo(value)} is not a finite number")
    return number


def _length(value: object, where: str, field: str) -> int:
    number = _number(value, where, field)
    if not number.is_integer() or not 1 <= number <= MAX_TRACE_TOKENS:
        raise _fail(where, f"{field}: {echo(value)} is not a whole number in 1..{MAX_TRACE_TOKENS}")
    return int(number)


def _one_key(record: dict[str, object], keys: tuple[str, ...], where: str, what: str) -> str:
    found = [k for k in keys if k in record]
    if len(found) != 1:
        named = "none" if not found else ", ".join(found)
        raise _fail(where, f"needs exactly one {what} field ({'/'.join(keys)}); has {named}")
    return found[0]


def _hash_ids(value: object, where: str, prompt: int) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < _MAX_HASH_ID for h in value
    ):
        raise _fail(where, "hash_ids: not a list of non-negative integers")
    most = math.ceil(prompt / MOONCAKE_BLOCK_TOKENS)
    if not value or len(value) > most:
        raise _fail(
            where,
            f"hash_ids: {len(value)} ids for {prompt} input tokens; "
            f"expected 1..{most} blocks of {MOONCAKE_BLOCK_TOKENS}",
        )
    return value


class _Columns:
    """The trace's columns as it streams in (compact arrays, one append per request)."""

    def __init__(self) -> None:
        self.time_s = array("d")
        self.inputs = array("q")
        self.outputs = array("q")
        self.flat = array("q")
        self.offsets = array("q", [0])
        self.with_hashes = 0
        self.sessions = SessionBlocks(MOONCAKE_BLOCK_TOKENS)

    def add(self, record: dict[str, object], where: str) -> None:
        unknown = sorted(set(record) - _KNOWN)
        if unknown:
            raise _fail(where, f"unknown field {echo(unknown[0])}")
        time_key = _one_key(record, tuple(TIME_KEYS), where, "time")
        t = _number(record[time_key], where, time_key) * TIME_KEYS[time_key]
        if not 0 <= t <= MAX_TRACE_SPAN_MS / 1e3:
            raise _fail(where, f"{time_key}: {echo(record[time_key])} is negative or past a year")
        if self.time_s and t < self.time_s[-1]:
            raise _fail(
                where, f"{time_key}: {echo(record[time_key])} is earlier than the line before"
            )
        in_key = _one_key(record, INPUT_KEYS, where, "input length")
        out_key = _one_key(record, OUTPUT_KEYS, where, "output length")
        prompt = _length(record[in_key], where, in_key)
        output = _length(record[out_key], where, out_key)
        ids = self._ids(record, where, prompt, output)
        self.time_s.append(t)
        self.inputs.append(prompt)
        self.outputs.append(output)
        self.flat.extend(ids)
        self.offsets.append(len(self.flat))

    def _ids(self, record: dict[str, object], where: str, prompt: int, output: int) -> list[int]:
        if "hash_ids" in record:
            self.with_hashes += 1
            return _hash_ids(record["hash_ids"], where, prompt)
        if "session" in record:
            session = str(record["session"]).strip()
            turn = _number(record.get("turn", 0), where, "turn")
            if not session or not turn.is_integer() or turn < 0:
                raise _fail(where, "session/turn: a non-empty session and a whole turn >= 0")
            self.with_hashes += 1
            return self.sessions.turn(session, prompt, output)
        return []

    def trace(self, path: Path) -> Trace:
        if not self.inputs:
            raise _fail(str(path), "no requests")
        n = len(self.inputs)
        if self.with_hashes not in (0, n):
            raise _fail(str(path), "hash_ids or session on some lines only; give them on all")
        arrival = np.frombuffer(self.time_s, dtype=np.float64).copy()
        arrival -= arrival[0]  # replay starts at the first request
        blocks = None
        if self.with_hashes:
            blocks = BlockHashes(
                np.frombuffer(self.flat, dtype=np.int64).copy(),
                np.frombuffer(self.offsets, dtype=np.int64).copy(),
                MOONCAKE_BLOCK_TOKENS,
            )
        return Trace(
            arrival,
            np.frombuffer(self.inputs, dtype=np.int64).copy(),
            np.frombuffer(self.outputs, dtype=np.int64).copy(),
            blocks,
            str(path),
        )


@lru_cache(maxsize=4)
def _cached(path: str, mtime_ns: int, size: int) -> Trace:
    file = Path(path)
    columns = _Columns()
    with _open(file) as f:
        is_csv = file.suffix.lower() == ".csv"
        records = _csv_records(file, f) if is_csv else _json_records(file, f)
        for lineno, record in records:
            columns.add(record, f"{file}:{lineno}")
    return columns.trace(file)


def load_trace(path: str | Path) -> Trace:
    """The requests of trace file `path` (cached while the file is unchanged); InputError if bad."""
    file = Path(path)
    try:
        st = file.stat()
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise InputError(f"--trace {file}: cannot read ({getattr(exc, 'strerror', exc)})") from None
    return _cached(str(file), st.st_mtime_ns, st.st_size)
