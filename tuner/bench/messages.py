"""Shape checks of what an OpenAI-compatible server sends: a message of an unexpected shape is
a failed request (ValueError) or a one-line error, never a crash of the benchmark."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tuner.errors import InputError, echo, printable

__all__ = [
    "body_message",
    "check_url",
    "choice_text",
    "is_count",
    "is_text",
    "stream_message",
    "token_counts",
]

_MAX_PORT = 65535  # TCP ports are 16-bit
_ERROR_BODY_CHARS = 200  # enough of an error body to name the problem on one line


def body_message(body: str) -> str:
    """The `message` of an OpenAI error body, else the body's start, on one line."""
    try:
        data = json.loads(body)
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message", body) if isinstance(err, dict) else str(err)
    except (json.JSONDecodeError, AttributeError):
        msg = body
    return printable(" ".join(str(msg).split()))[:_ERROR_BODY_CHARS]  # server text: escaped


def is_text(value: object) -> bool:
    """A non-empty string."""
    return isinstance(value, str) and bool(value)


def is_count(value: object) -> bool:
    """A non-negative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def stream_message(data: str) -> dict[str, Any]:
    """One SSE `data:` payload as a JSON object; ValueError (a failed request) otherwise."""
    chunk = json.loads(data)  # JSONDecodeError is a ValueError
    if not isinstance(chunk, dict):
        raise ValueError(f"unexpected stream message (not a JSON object): {data[:80]}")
    choices, usage = chunk.get("choices"), chunk.get("usage")
    if choices is not None and not (
        isinstance(choices, list) and all(isinstance(c, dict) for c in choices)
    ):
        raise ValueError(f"unexpected 'choices' in stream message: {data[:80]}")
    if usage is not None and not isinstance(usage, dict):
        raise ValueError(f"unexpected 'usage' in stream message: {data[:80]}")
    return chunk


def choice_text(choices: list[dict[str, Any]]) -> str:
    """The text of a chunk's first choice (completions `text` or chat `delta.content`)."""
    choice = choices[0]
    delta = choice.get("delta")
    text = choice.get("text") or (delta.get("content") if isinstance(delta, dict) else None)
    return text if isinstance(text, str) else ""


def token_counts(usage: dict[str, Any]) -> tuple[int | None, int | None]:
    """(completion_tokens, prompt_tokens) of a usage object; ValueError when not counts."""
    completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    for v in (completion, prompt):
        if v is not None and not is_count(v):
            raise ValueError(f"unexpected token counts in 'usage': {str(usage)[:80]}")
    return completion, prompt


def check_url(url: str) -> str:
    """`url` if it is an http(s) URL with a host; InputError naming the problem otherwise."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise InputError(f"--url {echo(url)}: not a URL ({exc})") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InputError(
            f"--url {echo(url)}: expected http(s)://HOST[:PORT], e.g. http://127.0.0.1:8000"
        )
    if parsed.port is not None and not 1 <= parsed.port <= _MAX_PORT:
        raise InputError(f"--url {echo(url)}: port {parsed.port} is not in 1..{_MAX_PORT}")
    return url
