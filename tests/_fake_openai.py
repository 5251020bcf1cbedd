"""A tiny OpenAI-compatible streaming server on loopback with known token timings (for tests).

Raw asyncio HTTP/1.1 (no web framework), run in a background thread. Each request streams
`tokens_per_chunk` tokens per SSE chunk: the first chunk `ttft_s` after the request arrives,
then one chunk every `itl_s`. Without `ignore_eos` a request stops at `eos_after` tokens, like
a model emitting EOS early. It also answers `/health` and a vLLM-style `/metrics`.

Run as a script (`python _fake_openai.py -m vllm... --port N --served-model-name M`) it stands
in for a vLLM server process: unknown arguments are ignored, `--fake-crash LINE` prints LINE and
exits 1 at startup, `--fake-startup-s S` delays readiness.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeServerConfig:
    """Behaviour of the fake server."""

    model: str = "fake-model"
    ttft_s: float = 0.05
    itl_s: float = 0.01
    tokens_per_chunk: int = 1
    eos_after: int | None = None  # stop early unless ignore_eos (None = never)
    fail_every: int = 0  # every n-th generation request answers HTTP 500 (0 = never)
    reject_extra_params: bool = False  # 400 when ignore_eos/min_tokens are sent (strict server)
    send_usage: bool = True
    tokenize: bool = True
    api_key: str | None = None
    # Misbehaviours (for hardening tests):
    raw_data: tuple[str, ...] = ()  # these `data:` payloads replace every token chunk
    cut_after: int | None = None  # end the stream after this many tokens, without [DONE]
    tokenize_tokens: list[Any] | None = None  # /tokenize answers these instead
    usage_override: Any = None  # sent as the `usage` value when not None
    # After this many tokens send `data: {"error": ...}` (vLLM's aborted generation), then [DONE].
    error_after: int | None = None
    long_line_bytes: int = 0  # > 0: the first chunk is one SSE line of this many bytes


@dataclass
class FakeServer:
    """Handle of a running fake server: its URL and every generation request body it received."""

    config: FakeServerConfig
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


def _tokenize(text: str) -> list[int]:
    return [1000 + sum(map(ord, w)) for w in text.split()]


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, path, headers, body


def _response(status: int, payload: object) -> bytes:
    body = json.dumps(payload).encode()
    reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}.get(
        status, "Error"
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _chunk(data: str) -> bytes:
    raw = f"data: {data}\n\n".encode()
    return f"{len(raw):x}\r\n".encode() + raw + b"\r\n"


def _per_position(generated: int) -> list[int]:
    """Accepted tokens at draft positions 0-3, summing to `generated` (the accepted total)."""
    first, second, third = generated // 2, generated // 4, generated // 8
    return [first, second, third, generated - first - second - third]


def _metrics_text(generated: int, prompt: int, running: int) -> str:
    """vLLM-style exposition: spec decode accepts half the drafts, prefix cache hits a quarter."""
    lines = [
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0"}} {generated}.0',
        f'vllm:prompt_tokens_total{{engine="0"}} {prompt}.0',
        f'vllm:num_preemptions_total{{engine="0"}} {generated // 100}.0',
        f'vllm:num_requests_running{{engine="0"}} {running}.0',
        'vllm:num_requests_waiting{engine="0"} 0.0',
        f'vllm:kv_cache_usage_perc{{engine="0"}} {min(running / 10, 1.0)}',
        f'vllm:spec_decode_num_drafts_total{{engine="0"}} {generated // 2}.0',
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {generated * 2}.0',
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {generated}.0',
        # Per position (vLLM labels them 0..k-1): every draft accepts its first token.
        *(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {n}.0'
            for i, n in enumerate(_per_position(generated))
        ),  # fmt: skip
        f'vllm:prefix_cache_queries_total{{engine="0"}} {prompt}.0',
        f'vllm:prefix_cache_hits_total{{engine="0"}} {prompt // 4}.0',
        'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="4096"} 1.0',
    ]
    return "\n".join(lines) + "\n"


class _Handler:
    def __init__(self, server: FakeServer):
        self.server = server
        self.cfg = server.config
        self.generations = 0
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.running = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    method, path, headers, body = await _read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                await self.route(method, path, headers, body, writer)
        finally:
            writer.close()

    async def route(self, method, path, headers, body, writer) -> None:
        cfg = self.cfg
        if cfg.api_key and headers.get("authorization") != f"Bearer {cfg.api_key}":
            writer.write(_response(401, {"error": {"message": "bad key"}}))
        elif path == "/health":
            writer.write(_response(200, {}))
        elif path == "/metrics":
            text = _metrics_text(self.generated_tokens, self.prompt_tokens, self.running)
            body = text.encode()
            writer.write(
                f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        elif path == "/v1/models":
            writer.write(_response(200, {"data": [{"id": cfg.model, "object": "model"}]}))
        elif path == "/tokenize" and cfg.tokenize:
            tokens = cfg.tokenize_tokens or _tokenize(json.loads(body)["prompt"])
            writer.write(_response(200, {"tokens": tokens, "count": len(tokens)}))
        elif path in ("/v1/completions", "/v1/chat/completions"):
            await self.generate(path, headers, json.loads(body), writer)
        else:
            writer.write(_response(404, {"error": {"message": f"no route {path}"}}))
        await writer.drain()

    async def generate(self, path, headers, req, writer) -> None:
        cfg = self.cfg
        self.server.bodies.append(req)
        self.server.headers.append(headers)
        self.generations += 1
        if cfg.fail_every and self.generations % cfg.fail_every == 0:
            writer.write(_response(500, {"error": {"message": "injected failure"}}))
            return
        if cfg.reject_extra_params and ("ignore_eos" in req or "min_tokens" in req):
            writer.write(_response(400, {"error": {"message": "unknown field ignore_eos"}}))
            return
        n = req["max_tokens"]
        if cfg.eos_after is not None and not req.get("ignore_eos"):
            n = min(n, cfg.eos_after)
        prompt = req.get("prompt", "")
        n_in = len(prompt) if isinstance(prompt, list) else len(_tokenize(str(prompt)))
        chat = path.endswith("chat/completions")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self.running += 1
        try:
            await self.stream(n, n_in, chat, req, writer)
        finally:
            self.running -= 1

    async def stream(self, n: int, n_in: int, chat: bool, req: dict[str, Any], writer) -> None:
        cfg = self.cfg
        self.prompt_tokens += n_in
        await asyncio.sleep(cfg.ttft_s)
        sent = 0
        if cfg.raw_data:
            for data in cfg.raw_data:
                writer.write(_chunk(data))
            writer.write(_chunk("[DONE]") + b"0\r\n\r\n")
            return
        if cfg.long_line_bytes:
            writer.write(_chunk('{"pad": "' + "x" * cfg.long_line_bytes + '"}'))
        while sent < n:
            if cfg.error_after is not None and sent >= cfg.error_after:
                error = {"error": {"message": "generation aborted", "code": 500}}
                writer.write(_chunk(json.dumps(error)) + _chunk("[DONE]") + b"0\r\n\r\n")
                return
            if cfg.cut_after is not None and sent >= cfg.cut_after:
                writer.write(b"0\r\n\r\n")  # the stream just ends: no usage, no [DONE]
                return
            k = min(cfg.tokens_per_chunk, n - sent)
            text = " tok" * k
            choice = (
                {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            )
            writer.write(_chunk(json.dumps({"choices": [choice]})))
            await writer.drain()
            sent += k
            self.generated_tokens += k
            if sent < n:
                await asyncio.sleep(cfg.itl_s)
        if cfg.send_usage and (req.get("stream_options") or {}).get("include_usage"):
            usage: Any = {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n}
            if cfg.usage_override is not None:
                usage = cfg.usage_override
            writer.write(_chunk(json.dumps({"choices": [], "usage": usage})))
        writer.write(_chunk("[DONE]") + b"0\r\n\r\n")


class running_fake_server:
    """Context manager: start the fake server on a free loopback port in a thread."""

    def __init__(self, config: FakeServerConfig | None = None):
        self.server = FakeServer(config or FakeServerConfig())
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        srv = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(_Handler(self.server), "127.0.0.1", 0), self.loop
        ).result()
        self._srv = srv
        port = srv.sockets[0].getsockname()[1]
        self.server.url = f"http://127.0.0.1:{port}"
        return self.server

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self._srv.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


def main(argv: list[str]) -> None:
    """Serve in the foreground, standing in for `python -m vllm.entrypoints.openai.api_server`."""
    import argparse
    import sys
    import time

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="fake-model")
    parser.add_argument("--fake-crash", default=None)
    parser.add_argument("--fake-startup-s", type=float, default=0.0)
    parser.add_argument("--fake-itl-s", type=float, default=0.01)
    args, _ = parser.parse_known_args(argv)
    if args.fake_crash:
        print("INFO starting", flush=True)
        print(args.fake_crash, flush=True)
        sys.exit(1)
    time.sleep(args.fake_startup_s)
    cfg = FakeServerConfig(model=args.served_model_name, ttft_s=0.02, itl_s=args.fake_itl_s)

    async def serve() -> None:
        srv = await asyncio.start_server(_Handler(FakeServer(cfg)), "127.0.0.1", args.port)
        print(f"INFO serving on port {args.port}", flush=True)
        async with srv:
            await srv.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
