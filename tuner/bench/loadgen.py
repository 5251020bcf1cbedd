"""Load generator for OpenAI-compatible servers (vLLM, SGLang, TensorRT-LLM, llama.cpp).

Streams `/v1/completions` or `/v1/chat/completions` requests, open-loop (Poisson arrivals) or
closed-loop (N users), times every chunk and aggregates with `tuner.bench.stats` (vLLM
`bench serve` definitions). Input lengths are exact when the server can tokenize (`/tokenize`,
vLLM and SGLang): completions then send token-id prompts cut from a tokenized corpus. Output
lengths are exact when the server honours `ignore_eos` / `min_tokens`; the first warm-up request
probes that, and every request's `usage.completion_tokens` is checked against what was asked.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from tuner.bench.messages import (
    body_message,
    check_url,
    choice_text,
    is_text,
    stream_message,
    token_counts,
)
from tuner.bench.stats import RequestResult, aggregate
from tuner.errors import BackendError
from tuner.specs import SLA, Metrics, Workload

__all__ = [
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

# Common English words: the corpus prompts are cut from (tokenizes to ~1 token per word).
_VOCABULARY = (
    "the of and to in is was for on that with as by at from his her it an are were which this "
    "be or has had not but one all their they new more also first after two who its been "
    "time would can year people other when into some out only city about over state could "
    "world made most many like three school through war then them between years under where "
    "music life house water small group long great right high place part number before while "
    "called found team well during work game back river early family since second south north "
    "east west film light book open public large power local along still"
)
_WORDS = _VOCABULARY.split()
_PATHS: dict[Api, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_CONNECT_TIMEOUT_S = 10.0
_PREFLIGHT_TIMEOUT_S = 30.0


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
    warmup_requests: int = 1
    exact_output: bool = True  # send ignore_eos + min_tokens so every output has the asked length
    temperature: float = 0.0


@dataclass(frozen=True)
class PlannedRequest:
    """One request to send: the prompt (token ids or text) and the lengths it was planned with."""

    prompt: list[int] | str
    input_tokens: int
    output_tokens: int


def _sample_length(mean: int, spread: float, rng: random.Random) -> int:
    lo, hi = round(mean * (1 - spread)), round(mean * (1 + spread))
    return max(1, rng.randint(lo, hi) if hi > lo else mean)


def _corpus_words(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(_WORDS) for _ in range(n)]


def plan_requests(
    workload: Workload, count: int, token_pool: list[int] | None, *, seed_offset: int = 0
) -> list[PlannedRequest]:
    """Prompts and lengths for `count` requests; token-id prompts cut from `token_pool` if given.

    A shared prefix of `prefix_cache_hit` x input tokens (the pool's start) opens every prompt;
    the rest is a window at a random offset, so prompts differ after the prefix.
    """
    rng = random.Random(workload.seed + seed_offset)
    planned = []
    for _ in range(count):
        isl = _sample_length(workload.input_tokens, workload.length_spread, rng)
        osl = _sample_length(workload.output_tokens, workload.length_spread, rng)
        shared = min(isl, round(workload.prefix_cache_hit * isl))
        if token_pool:
            start = rng.randrange(len(token_pool))
            body = [token_pool[(start + i) % len(token_pool)] for i in range(isl - shared)]
            planned.append(PlannedRequest(token_pool[:shared] + body, isl, osl))
        else:
            words = _corpus_words(shared, workload.seed) + [
                rng.choice(_WORDS) for _ in range(isl - shared)
            ]
            planned.append(PlannedRequest(" ".join(words), isl, osl))
    return planned


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc or type(exc).__name__})"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return f"connection lost ({exc or type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _Client:
    """One benchmark's HTTP session and what it learned about the server."""

    def __init__(self, endpoint: Endpoint, options: LoadOptions, max_connections: int):
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.endpoint = endpoint
        self.options = options
        self.model = endpoint.model or ""
        self.exact_output = options.exact_output
        self.usage_seen = True
        self.http = httpx.AsyncClient(
            base_url=endpoint.base_url,
            headers=headers,
            timeout=httpx.Timeout(options.timeout_s, connect=_CONNECT_TIMEOUT_S),
            limits=httpx.Limits(max_connections=max_connections),
        )

    async def resolve_model(self) -> None:
        """Check the server answers and serves the model; pick the first one if none was named."""
        url = self.endpoint.base_url
        try:
            resp = await self.http.get("/v1/models", timeout=_PREFLIGHT_TIMEOUT_S)
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
                f"model {self.model!r} is not served at {url}; served: {', '.join(served)}"
            )
        self.model = self.model or served[0]

    async def token_pool(self, min_tokens: int, seed: int) -> list[int] | None:
        """Token ids of a word corpus as the server tokenizes it, or None if it cannot."""
        text = " ".join(_corpus_words(2 * min_tokens + 64, seed))
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        try:
            resp = await self.http.post("/tokenize", json=body, timeout=_PREFLIGHT_TIMEOUT_S)
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

    async def send(self, req: PlannedRequest) -> RequestResult:
        """Stream one request; never raises (a failure is a result with its reason)."""
        result = RequestResult(
            input_tokens=req.input_tokens, requested_output_tokens=req.output_tokens
        )
        try:
            await asyncio.wait_for(self._stream(req, result), self.options.timeout_s)
        except asyncio.TimeoutError:
            result.success, result.error = False, f"timeout after {self.options.timeout_s:g} s"
        except (httpx.HTTPError, OSError, ValueError) as exc:
            result.success, result.error = False, _error_text(exc)
        return result

    async def _stream(self, req: PlannedRequest, result: RequestResult) -> None:
        path = _PATHS[self.endpoint.api]
        chunks_with_text = 0
        usage_tokens: int | None = None
        prompt_tokens: int | None = None
        start = last = time.perf_counter()
        async with self.http.stream("POST", path, json=self.payload(req)) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")
                result.error = f"HTTP {resp.status_code}: {body_message(body)}"
                return
            done_seen = False
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, SSE comments and event names
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    done_seen = True
                    break
                chunk = stream_message(data)
                if "error" in chunk:
                    result.error = f"server error: {body_message(data)}"
                    return
                if choices := chunk.get("choices"):
                    now = time.perf_counter()
                    if result.success:
                        result.itl_s.append(now - last)
                    else:
                        result.success, result.ttft_s = True, now - start
                    last = now
                    chunks_with_text += bool(choice_text(choices))
                if usage := chunk.get("usage"):
                    usage_tokens, prompt_tokens = token_counts(usage)
                    result.input_tokens = prompt_tokens or result.input_tokens
        if not result.success:
            result.error = "the stream carried no tokens"
            return
        if not done_seen:
            # The connection ended cleanly mid-answer: a cut stream is not a served request.
            result.success = False
            result.error = f"stream ended without [DONE] after {chunks_with_text} token chunks"
            return
        result.e2e_s = last - start
        if usage_tokens is None:
            self.usage_seen = False
        result.output_tokens = usage_tokens if usage_tokens is not None else chunks_with_text

    async def warm_up(self, requests: list[PlannedRequest]) -> None:
        """Send warm-up requests one by one; the first also probes ignore_eos/min_tokens support."""
        for i, req in enumerate(requests):
            result = await self.send(req)
            if i == 0 and not result.success and self.exact_output and _rejects_params(result):
                self.exact_output = False
                result = await self.send(req)
            if not result.success:
                raise BackendError(
                    f"warm-up request to {self.endpoint.base_url} failed: {result.error}"
                )

    async def aclose(self) -> None:
        """Close the HTTP session."""
        await self.http.aclose()


def _rejects_params(result: RequestResult) -> bool:
    return (result.error or "").startswith(("HTTP 400", "HTTP 422"))


async def _open_loop(
    client: _Client, reqs: list[PlannedRequest], rate_rps: float, seed: int, done: Callable
) -> list[RequestResult]:
    rng = random.Random(seed)
    tasks = []
    for req in reqs:
        tasks.append(asyncio.create_task(done(client.send(req))))
        await asyncio.sleep(rng.expovariate(rate_rps))
    return list(await asyncio.gather(*tasks))


async def _closed_loop(
    client: _Client, reqs: list[PlannedRequest], users: int, done: Callable
) -> list[RequestResult]:
    results: list[RequestResult | None] = [None] * len(reqs)
    queue = iter(range(len(reqs)))

    async def user() -> None:
        for i in queue:
            results[i] = await done(client.send(reqs[i]))

    await asyncio.gather(*(user() for _ in range(min(users, len(reqs)))))
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

    `on_measure_start` runs after the warm-up, just before the first measured request (a backend
    snapshots server counters there).
    """
    options = options or LoadOptions()
    users = workload.users
    client = _Client(endpoint, options, max_connections=max(users, 1) + workload.num_requests)
    try:
        await client.resolve_model()
        max_isl = round(workload.input_tokens * (1 + workload.length_spread))
        pool = None
        if endpoint.api == "completions":
            pool = await client.token_pool(max_isl, workload.seed)
        await client.warm_up(plan_requests(workload, options.warmup_requests, pool, seed_offset=1))
        reqs = plan_requests(workload, workload.num_requests, pool)
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
        start = time.perf_counter()
        if workload.rate_rps is not None:
            results = await _open_loop(client, reqs, workload.rate_rps, workload.seed, done)
        else:
            results = await _closed_loop(client, reqs, users, done)
        duration_s = time.perf_counter() - start
    finally:
        await client.aclose()
    metrics = aggregate(results, duration_s, backend=backend, sla=sla, num_gpus=num_gpus)
    metrics.extra.update(
        model=client.model,
        api=endpoint.api,
        input_tokens_exact=pool is not None,
        output_tokens_exact=client.exact_output and metrics.extra["output_length_mismatches"] == 0,
        output_tokens_from="usage" if client.usage_seen else "chunks",
        warmup_requests=options.warmup_requests,
        arrival=f"poisson {workload.rate_rps:g} rps"
        if workload.rate_rps is not None
        else f"closed loop {users} users",
    )
    return metrics


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


def run_workload(
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
    """Synchronous `arun_workload` (runs its own event loop)."""
    return asyncio.run(
        arun_workload(
            endpoint,
            workload,
            options=options,
            sla=sla,
            backend=backend,
            num_gpus=num_gpus,
            on_progress=on_progress,
            on_measure_start=on_measure_start,
        )
    )
