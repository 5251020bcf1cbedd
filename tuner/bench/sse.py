"""Reading a server's answer within byte caps: an event stream's lines and a refused body.

A server decides how long its lines and bodies are; these readers stop at a cap so a broken or
hostile one cannot fill memory.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx

__all__ = ["MAX_ERROR_BODY_BYTES", "MAX_SSE_LINE_BYTES", "read_capped", "sse_lines"]

# One SSE line is one token chunk of a few hundred bytes (a chunk with logprobs a few KiB); a
# longer line is a broken or hostile server, refused before it fills memory.
MAX_SSE_LINE_BYTES = 1024 * 1024
# Enough of a refused request's body to name the problem; the rest is not read.
MAX_ERROR_BODY_BYTES = 64 * 1024


async def read_capped(resp: httpx.Response, limit: int) -> bytes:
    """The first `limit` bytes of a response body (the rest is never read)."""
    data = bytearray()
    async for piece in resp.aiter_bytes():
        data += piece[: limit - len(data)]
        if len(data) >= limit:
            break
    return bytes(data)


async def sse_lines(resp: httpx.Response) -> AsyncGenerator[str, None]:
    """The lines of an event stream; ValueError (a failed request) on a line over the cap."""
    buf = bytearray()
    async for piece in resp.aiter_bytes():
        scan_from = len(buf)  # before the first yield, a newline can only be in the new piece
        buf += piece
        while 0 <= (end := buf.find(b"\n", scan_from)) <= MAX_SSE_LINE_BYTES:
            yield buf[:end].rstrip(b"\r").decode("utf-8", errors="replace")
            del buf[: end + 1]
            scan_from = 0
        if len(buf) > MAX_SSE_LINE_BYTES:  # what is left starts a line already over the cap
            raise ValueError(f"a stream line longer than {MAX_SSE_LINE_BYTES} bytes")
    if buf:
        yield buf.decode("utf-8", errors="replace")
