"""Load generator for OpenAI-compatible servers (vLLM, SGLang, TensorRT-LLM, llama.cpp).

Streams `/v1/completions` or `/v1/chat/completions` requests, open-loop (Poisson arrivals) or
closed-loop (N users), times every chunk and aggregates with `tuner.bench.stats` (vLLM
`bench serve` definitions). Lengths, arrival times, staggered user starts and the warm-up
requests come from `tuner.bench.arrivals` (the same trace as the simulator and the engine
replay for one seed); warm-up requests run inside the load and are left out of the statistics.
Input lengths are exact when the server can tokenize (`/tokenize`, vLLM and SGLang):
completions then send token-id prompts cut from a tokenized corpus. Output
lengths are exact when the server honours `ignore_eos` / `min_tokens`; a probe request sent alone
before the load checks that (and times one request, the default ramp closed-loop users start
over), and every request's `usage.completion_tokens` is checked against what was asked.

A request counts as served only when its stream ends in `data: [DONE]` with no error event (vLLM
sends `data: {"error": ...}` when it aborts a generation); its output tokens are what was
streamed: the content chunks, or the server's `usage` count when that lies between the chunks
seen and the `max_tokens` asked (a chunk may carry several speculative tokens). SSE lines and
error bodies are read up to a byte cap. `LoadOptions.deadline` bounds the whole run: past it no
request is sent, in-flight ones are cut, and the Metrics say so (`BUDGET_CUT`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar

import httpx

from tuner.bench.arrivals import ArrivalPlan, plan_workload
from tuner.bench.messages import (
    body_message,
    check_url,
    choice_text,
    is_text,
    stream_message,
    token_counts,
)
from tuner.bench.prompts import PlannedRequest, corpus_words, plan_requests
from tuner.bench.stats import BUDGET_CUT, RequestResult, aggregate_steady
from tuner.bench.trace_plan import workload_plan
from tuner.errors import BackendError, printable
from tuner.specs import SLA, Metrics, Workload

__all__ = [
    "MAX_ERROR_BODY_BYTES",
    "MAX_SSE_LINE_BYTES",
    "Endpoint",
    "LoadOptions",
    "PlannedRequest",
    "ProgressFn",
    "plan_requests",
    "run_workload",
    "arun_workload",
    "check_endpoint",
    "check_url",
]

Api = Literal["completions", "chat"]
ProgressFn = Callable[[int, int], None]  # (finished requests, total requests)

_P = ParamSpec("_P")
_T = TypeVar("_T")
_PATHS: dict[Api, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_CONNECT_TIMEOUT_S = 10.0
_PREFLIGHT_TIMEOUT_S = 30.0
# One SSE line is one token chunk of a few hundred bytes (a chunk with logprobs a few KiB); a
# longer line is a broken or hostile server, refused before it fills memory.
MAX_SSE_LINE_BYTES = 1024 * 1024
# Enough of a refused request's body to name the problem; the rest is not read.
MAX_ERROR_BODY_BYTES = 64 * 1024
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


class _BudgetCut(Exception):
    """The time budget ran out before the load could start."""


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc or type(exc).__name__})"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return f"connection lost ({exc or type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _read_capped(resp: httpx.Response, limit: int) -> bytes:
    """The first `limit` bytes of a response body (the rest is never read)."""
    data = bytearray()
    async for piece in resp.aiter_bytes():
        data += piece[: limit - len(data)]
        if len(data) >= limit:
            break
    return bytes(data)


async def _sse_lines(resp: httpx.Response) -> AsyncGenerator[str, None]:
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


class _Client:
    """One benchmark's HTTP session and what it learned about the server."""

    def __init__(self, endpoint: Endpoint, options: LoadOptions, max_connections: int):
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.endpoint = endpoint
        self.options = options
        self.model = endpoint.model or ""
        self.exact_output = options.exact_output
        self.usage_seen = True
        # The pre-flight checks wait no longer than a request may (`bench --timeout`).
        self.preflight_s = min(_PREFLIGHT_TIMEOUT_S, options.timeout_s)
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
            raise BackendError(f"cannot reach {url}: {_error_text(exc)}") from exc
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
            result.success, result.error = False, _error_text(exc)
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
                body = (await _read_capped(resp, MAX_ERROR_BODY_BYTES)).decode(errors="replace")
                result.error = f"HTTP {resp.status_code}: {body_message(body)}"
                return
            done_seen = False
            async with contextlib.aclosing(_sse_lines(resp)) as lines:
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
                raise _BudgetCut
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


async def _open_loop(
    client: _Client, reqs: list[PlannedRequest], plan: ArrivalPlan, done: Callable
) -> list[RequestResult]:
    assert plan.arrival_s is not None
    t0 = time.perf_counter()
    tasks = []
    for req, at in zip(reqs, plan.arrival_s.tolist(), strict=True):
        wait_s = max(0.0, at - (time.perf_counter() - t0))
        left = client.time_left()
        if left is not None and wait_s >= left:
            break  # the budget ends before this arrival: nothing more is sent
        await asyncio.sleep(wait_s)
        tasks.append(asyncio.create_task(done(client.send(req, t0))))
    # Each send waits at most the budget left, so this returns by the deadline.
    return list(await asyncio.gather(*tasks))


async def _closed_loop(
    client: _Client, reqs: list[PlannedRequest], starts_s: list[float], done: Callable
) -> list[RequestResult]:
    """User u sends request u at `starts_s[u]`, then the next unsent index after each finish."""
    results: list[RequestResult | None] = [None] * len(reqs)
    queue = iter(range(len(starts_s), len(reqs)))
    t0 = time.perf_counter()

    async def user(u: int) -> None:
        wait_s = max(0.0, starts_s[u] - (time.perf_counter() - t0))
        left = client.time_left()
        if left is not None and wait_s >= left:
            return  # the budget ends before this user starts
        await asyncio.sleep(wait_s)
        results[u] = await done(client.send(reqs[u], t0))
        for i in queue:
            if client.expired():
                return  # past the budget no user sends again
            results[i] = await done(client.send(reqs[i], t0))

    await asyncio.gather(*(user(u) for u in range(len(starts_s))))
    return [r for r in results if r is not None]


async def arun_workload(
    endpoint: Endpoint,
    workload: Workload,
    *,
    options: LoadOptions | None = None,
    sla: SLA | None = None,
    backend: str = "bench",
    num_gpus: int = 1,
    on_progress: ProgressFn | None = None,
    on_measure_start: Callable[[], None] | None = None,
) -> Metrics:
    """Benchmark `endpoint` with `workload` (warm-up excluded) and aggregate the measurements.

    `on_measure_start` runs after the probe, just before the load (warm-up requests included)
    starts (a backend snapshots server counters there).
    """
    options = options or LoadOptions()
    plan = workload_plan(workload)  # sampled lengths, or a trace's requests and block ids
    client = _Client(endpoint, options, max_connections=plan.users + plan.count)
    try:
        await client.resolve_model()
        max_isl = int(plan.input_tokens.max())
        pool = (
            await client.token_pool(max_isl, workload.seed)
            if endpoint.api == "completions"
            else None
        )
        reqs = plan_requests(workload, plan, pool)
        # Probes at the mean lengths (no spread, no lengths file), content of another seed.
        mean = plan_workload(
            workload.model_copy(update={"length_spread": 0.0}), None, count=options.probe_requests
        )
        try:
            probe_e2e_s = await client.probe(plan_requests(workload, mean, pool, seed_offset=1))
        except _BudgetCut:
            return _budget_spent(backend, "before the load started (during the probe request)")
        finished = 0

        async def done(coro: Any) -> RequestResult:
            nonlocal finished
            result: RequestResult = await coro
            finished += 1
            if on_progress:
                on_progress(finished, len(reqs))
            return result

        if on_measure_start:
            on_measure_start()
        if plan.arrival_s is not None:
            results = await _open_loop(client, reqs, plan, done)
        else:
            ramp_s = workload.start_ramp_s if workload.start_ramp_s is not None else probe_e2e_s
            starts = plan.user_start_s(ramp_s).tolist()
            results = await _closed_loop(client, reqs, starts, done)
    finally:
        await client.aclose()
    # A request the budget cut is not a failure of the server: it is left out, and the Metrics
    # say the load was cut (a capacity search then stops instead of reading a partial probe).
    cut = sum(r.cut for r in results)
    results = [r for r in results if not r.cut]
    unsent = len(reqs) - len(results) - cut
    if not results:
        return _budget_spent(backend, "before any request finished")
    metrics = aggregate_steady(results, plan.warmup, backend=backend, sla=sla, num_gpus=num_gpus)
    if cut or unsent:
        metrics.extra.update({BUDGET_CUT: True, "budget_cut_requests": cut + unsent})
    metrics.extra.update(
        model=client.model,
        api=endpoint.api,
        input_tokens_exact=pool is not None,
        output_tokens_exact=client.exact_output and metrics.extra["output_length_mismatches"] == 0,
        output_tokens_from="usage" if client.usage_seen else "chunks",
        probe_requests=options.probe_requests,
        arrival=f"poisson {workload.rate_rps:g} rps"
        if workload.rate_rps is not None
        else f"closed loop {plan.users} users",
    )
    return metrics


def _budget_spent(backend: str, when: str) -> Metrics:
    """The infeasible Metrics of a load the time budget stopped `when`."""
    return Metrics.infeasible(f"the time budget ran out {when}", backend, extra={BUDGET_CUT: True})


def check_endpoint(endpoint: Endpoint, timeout_s: float = _PREFLIGHT_TIMEOUT_S) -> str:
    """The model `endpoint` serves (its own or the first listed); BackendError if unreachable."""

    async def check() -> str:
        client = _Client(endpoint, LoadOptions(timeout_s=timeout_s), max_connections=1)
        try:
            await client.resolve_model()
        finally:
            await client.aclose()
        return client.model

    return asyncio.run(check())


def _synchronous(fn: Callable[_P, Coroutine[Any, Any, _T]]) -> Callable[_P, _T]:
    """`fn` run to completion in its own event loop."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return asyncio.run(fn(*args, **kwargs))

    return run


# The same arguments as arun_workload, for callers outside an event loop.
run_workload = _synchronous(arun_workload)
