"""How a load is started and counted: the tuner's steady state, or a benchmark client's protocol.

The tuner's own numbers are steady state: closed-loop users start staggered over one request's
cycle and the first request of each user (10% of an open-loop run) is warm-up, left out. The
clients users check us with start differently, and report higher TTFT for it:

- `vllm bench serve --max-concurrency N` (request rate inf): every request is issued at once
  behind an N-slot semaphore, so all N users start in the same instant; it times one test prompt
  first and counts every one of `--num-prompts` requests. With `--request-rate R`: Poisson
  arrivals from t = 0, all counted.
- AIPerf `--concurrency N`: N workers start together; `--warmup-request-count` is 0 by default,
  so every request counts. With `--request-rate`: Poisson arrivals, all counted.
- GuideLLM `--profile concurrent --rate N` / `--profile poisson --rate R`: the same start; its
  warm-up is off by default and every request inside the run counts.

Under their defaults the three protocols replay the same way (a burst start, nothing left out);
they stay separate names so the output says which tool's number it is comparable with, and a
user who sets the tool's warm-up passes the same count to `--warmup`.
"""

from __future__ import annotations

from typing import get_args

from tuner.specs import ClientProtocol, Workload

__all__ = ["PROTOCOL_NAMES", "compare_hint", "protocol_line"]

PROTOCOL_NAMES: tuple[str, ...] = get_args(ClientProtocol)

# The command of each client that a number under its protocol is comparable with.
_HINTS = {
    "steady": "the tuner's steady state; a benchmark client's numbers need --protocol",
    "vllm-bench": "as `vllm bench serve --max-concurrency N` (or --request-rate R) --num-prompts M",
    "aiperf": "as `aiperf profile --concurrency N` (or --request-rate R) --request-count M",
    "guidellm": "as `guidellm benchmark --profile concurrent --rate N` (or --profile poisson)",
}


def compare_hint(protocol: str) -> str:
    """The client command a number under `protocol` is comparable with."""
    return _HINTS[protocol]


def protocol_line(wl: Workload) -> str:
    """One line saying which protocol the numbers follow: start, warm-up and counting."""
    ramp = wl.start_ramp_s
    if not wl.is_closed_loop:
        start = "open-loop Poisson arrivals from t = 0"
    elif ramp is None:
        start = "users start staggered"
    elif ramp == 0:
        start = "users start at once"
    else:
        start = f"users start spread over {ramp:g} s"
    warm = wl.warmup_count
    counted = "every request counted" if warm == 0 else f"{warm} warm-up requests not counted"
    return f"protocol {wl.protocol}: {start}, {counted} ({compare_hint(wl.protocol)})"
