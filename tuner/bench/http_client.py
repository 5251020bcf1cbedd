"""The HTTP session of one benchmark with one OpenAI-compatible server.

Pre-flight checks (the served model, the server's tokenizer), each request's JSON body, and the
stream of one request timed into a `RequestResult`. A request counts as served only when its
stream ends in `data: [DONE]` with no error event (vLLM sends `data: {"error": ...}` when it
aborts a generation); its output tokens are what was streamed: the content chunks, or the
server's `usage` count when that lies between the chunks seen and the `max_tokens` asked (a
chunk may carry several speculative tokens). The load itself is driven by `tuner.bench.loadgen`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from tuner.bench.messages import body_message, choice_text, is_text, stream_message, token_counts
from tuner.bench.prompts import PlannedRequest, corpus_words
from tuner.bench.sse import MAX_ERROR_BODY_BYTES, read_capped, sse_lines
from tuner.bench.stats import RequestResult
from tuner.errors import BackendError, printable

__all__ = [
    "PREFLIGHT_TIMEOUT_S",
    "Api",
    "BudgetCut",
    "Endpoint",
    "LoadOptions",
    "ServerClient",
    "error_text",
]

Api = Literal["completions", "chat"]
_PATHS: dict[Api, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_CONNECT_TIMEOUT_S = 10.0
PREFLIGHT_TIMEOUT_S = 30.0
# Prompt tokens a chat template may add to what was sent; a usage report of more than twice the
# prompt plus this is not this prompt's count and is ignored.
_TEMPLATE_TOKENS = 1024
_BUDGET_CUT_ERROR = "cut at the time budget"


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server: base URL, served model name (None = first listed), API."""

    url: str
    model: str | None = None
    api: Api = "completions"
    api_key: str | None = None

    @property
    def base_url(self) -> str:
        """URL without a trailing slash or a trailing /v1."""
        return self.url.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class LoadOptions:
    """How to drive the server (the Workload says what to send)."""

    timeout_s: float = 300.0
    probe_requests: int = 1  # sent one at a time before the load (ignore_eos check, ramp timing)
    exact_output: bool = True  # send ignore_eos + min_tokens so every output has the asked length
    temperature: float = 0.0
    deadline: float | None = None  # time.monotonic() past which nothing is sent or waited for


class BudgetCut(Exception):
    """The time budget ran out before the load could start."""


def error_text(exc: BaseException) -> str:
    """One line naming why a request failed: no connection, a lost one, or the exception."""
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc or type(exc).__name__})"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return f"connection lost ({exc or type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class ServerClient:
    """One benchmark's HTTP session and what it learned about the server."""

    def __init__(self, endpoint: Endpoint, options: LoadOptions, max_connections: int):
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.endpoint = endpoint
        self.options = options
        self.model = endpoint.model or ""
        self.exact_output = options.exact_output
        self.usage_seen = True
        # The pre-flight checks wait no longer than a request may (`bench --timeout`).
        self.preflight_s = min(PREFLIGHT_TIMEOUT_S, options.timeout_s)
        self.http = httpx.AsyncClient(
            base_url=endpoint.base_url,
            headers=headers,
            timeout=httpx.Timeout(
                options.timeout_s, connect=min(_CONNECT_TIMEOUT_S, options.timeout_s)
            ),
            limits=httpx.Limits(max_connections=max_connections),
        )

    def time_left(self) -> float | None:
        """Seconds until the deadline (never below 0), or None when there is none."""
        if self.options.deadline is None:
            return None
        return max(0.0, self.options.deadline - time.monotonic())

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.time_left() == 0.0

    def _preflight_timeout(self) -> float:
        left = self.time_left()
        return self.preflight_s if left is None else max(min(self.preflight_s, left), 1e-3)

    async def resolve_model(self) -> None:
        """Check the server answers and serves the model; pick the first one if none was named."""
        url = self.endpoint.base_url
        try:
            resp = await self.http.get("/v1/models", timeout=self._preflight_timeout())
        except httpx.HTTPError as exc:
            raise BackendError(f"cannot reach {url}: {error_text(exc)}") from exc
        if resp.status_code in (401, 403):
            raise BackendError(
                f"{url} rejected the API key (HTTP {resp.status_code}); "
                "set OPENAI_API_KEY or TUNER_API_KEY"
            )
        served: list[str] = []
        if resp.status_code == 200:
            try:
                listed = resp.json().get("data", [])
            except (ValueError, AttributeError):
                listed = []
            if isinstance(listed, list):
                served = [m["id"] for m in listed if isinstance(m, dict) and is_text(m.get("id"))]
        if not served and not self.model:
            raise BackendError(
                f"{url} is not an OpenAI-compatible server (GET /v1/models: HTTP "
                f"{resp.status_code}); check --url or name the model with --model"
            )
        if self.model and served and self.model not in served:
            raise BackendError(
                f"model {self.model!r} is not served at {url}; served: "
                + ", ".join(printable(m) for m in served)  # the server's ids, shown escaped
            )
        self.model = self.model or served[0]

    async def token_pool(self, min_tokens: int, seed: int) -> list[int] | None:
        """Token ids of a word corpus as the server tokenizes it, or None if it cannot."""
        text = " ".join(corpus_words(2 * min_tokens + 64, seed))
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        try:
            resp = await self.http.post("/tokenize", json=body, timeout=self._preflight_timeout())
            tokens = resp.json().get("tokens") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        if not isinstance(tokens, list) or len(tokens) < min_tokens:
            return None
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
            return None  # not token ids: fall back to text prompts
        return tokens

    def payload(self, req: PlannedRequest) -> dict[str, Any]:
        """The JSON body of one streamed request."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": req.output_tokens,
            "temperature": self.options.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.endpoint.api == "chat":
            text = req.prompt if isinstance(req.prompt, str) else " ".join(map(str, req.prompt))
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = req.prompt
        if self.exact_output:
            body["ignore_eos"] = True
            body["min_tokens"] = req.output_tokens
        return body

    async def send(self, req: PlannedRequest, t0: float | None = None) -> RequestResult:
        """Stream one request (sent `start_s` after `t0`); a failure is a result, not raised."""
        result = RequestResult(
            input_tokens=req.input_tokens, requested_output_tokens=req.output_tokens
        )
        result.start_s = time.perf_counter() - t0 if t0 is not None else 0.0
        limit, left = self.options.timeout_s, self.time_left()
        by_budget = left is not None and left < limit
        try:
            await asyncio.wait_for(self._stream(req, result), left if by_budget else limit)
        except asyncio.TimeoutError:
            result.success = False
            result.cut = by_budget
            result.error = _BUDGET_CUT_ERROR if by_budget else f"timeout after {limit:g} s"
        except (httpx.HTTPError, OSError, ValueError) as exc:
            result.success, result.error = False, error_text(exc)
        return result

    async def _stream(self, req: PlannedRequest, result: RequestResult) -> None:
        """Stream `req` into `result`: served only when it ends in [DONE] with no error event."""
        path = _PATHS[self.endpoint.api]
        chunks_with_text = 0
        seen_choices = False
        usage_tokens: int | None = None
        start = last = time.perf_counter()
        async with self.http.stream("POST", path, json=self.payload(req)) as resp:
            if resp.status_code != 200:
                body = (await read_capped(resp, MAX_ERROR_BODY_BYTES)).decode(errors="replace")
                result.error = f"HTTP {resp.status_code}: {body_message(body)}"
                return
            done_seen = False
            async with contextlib.aclosing(sse_lines(resp)) as lines:
                async for line in lines:
                    if not line.startswith("data:"):
                        continue  # blank separators, SSE comments and event names
                    data = line.removeprefix("data:").strip()
                    if data == "[DONE]":
                        done_seen = True
                        break
                    chunk = stream_message(data)
                    if "error" in chunk:
                        # An aborted generation: what was streamed before is not a served request.
                        result.success = False
                        result.error = f"server error: {body_message(data)}"
                        return
                    if choices := chunk.get("choices"):
                        now = time.perf_counter()
                        if seen_choices:
                            result.itl_s.append(now - last)
                        else:
                            seen_choices, result.ttft_s = True, now - start
                        last = now
                        chunks_with_text += bool(choice_text(choices))
                    if usage := chunk.get("usage"):
                        usage_tokens, prompt_tokens = token_counts(usage)
                        # The server's prompt count, unless it cannot be this prompt's.
                        if (
                            prompt_tokens
                            and prompt_tokens <= 2 * req.input_tokens + _TEMPLATE_TOKENS
                        ):
                            result.input_tokens = prompt_tokens
        if not seen_choices:
            result.error = "the stream carried no tokens"
            return
        if not done_seen:
            # The connection ended cleanly mid-answer: a cut stream is not a served request.
            result.error = f"stream ended without [DONE] after {chunks_with_text} token chunks"
            return
        result.success, result.e2e_s = True, last - start
        # What was streamed decides the count: a usage figure is taken only when it lies between
        # the content chunks seen and the max_tokens asked (a chunk may carry several tokens).
        plausible = (
            usage_tokens is not None and chunks_with_text <= usage_tokens <= req.output_tokens
        )
        if not plausible:
            self.usage_seen = False
        result.output_tokens = usage_tokens if plausible and usage_tokens else chunks_with_text

    async def probe(self, requests: list[PlannedRequest]) -> float:
        """Send probe requests one by one (the first checks ignore_eos/min_tokens support).

        Returns the last probe's end-to-end time, seconds (0 when there was none).
        """
        e2e = 0.0
        for i, req in enumerate(requests):
            result = await self.send(req)
            if i == 0 and not result.success and self.exact_output and _rejects_params(result):
                self.exact_output = False
                result = await self.send(req)
            if result.cut:
                raise BudgetCut
            if not result.success:
                raise BackendError(
                    f"probe request to {self.endpoint.base_url} failed: {result.error}"
                )
            e2e = result.e2e_s
        return e2e

    async def aclose(self) -> None:
        """Close the HTTP session."""
        await self.http.aclose()


def _rejects_params(result: RequestResult) -> bool:
    return (result.error or "").startswith(("HTTP 400", "HTTP 422"))
