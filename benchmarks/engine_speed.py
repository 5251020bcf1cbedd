"""Reference-engine decode speed on this machine: bf16 vs int8 vs int4, side by side in one run.

Prints batch-1 decode tokens/s per weight variant, the achieved fraction of the memory-bandwidth
bound (weight bytes read per token x tokens/s / copy bandwidth measured in this same run), and
batched decode throughput at batch 1/8/32. Variants are timed in interleaved rounds and the
median round is kept, so load from other processes hits every variant alike.
Targets: int8 weight-only >= 1.5x bf16 at batch 1; best variant >= 50% of the bandwidth bound.

    python benchmarks/engine_speed.py [--model smollm2-135m] [--rounds 5] [--steps 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from tuner.catalog import load_model
from tuner.engine.generate import Engine, EngineLimits
from tuner.engine.model import Transformer
from tuner.engine.quantize import quantize_model
from tuner.engine.weights import build_model

TARGET_INT8_SPEEDUP = 1.5
TARGET_BANDWIDTH_FRACTION = 0.5
# "bf16" runs the fastest dense kernel (oneDNN-prepacked); "bf16-F.linear" is the plain
# aten path, shown for reference. Speedups are against the fastest bf16.
VARIANTS = ("bf16", "bf16-F.linear", "int8-wo", "int4-awq")
# --compile adds these: the engine step through torch.compile (tuner/engine/compile.py). bf16
# compiles the plain F.linear model (Inductor freezes and prepacks it itself).
COMPILED_VARIANTS = ("bf16+compile", "int8-wo+compile")
BATCHES = (1, 8, 32)
_COPY_BYTES = 512 * 1024**2  # far larger than any CPU cache, so the copy streams from DRAM
_PROMPT_TOKENS = 32


def copy_bandwidth_gbps(repeats: int = 5) -> float:
    """Best-of-`repeats` STREAM-copy bandwidth (bytes read + written per second), GB/s."""
    src = torch.ones(_COPY_BYTES // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in before timing
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * _COPY_BYTES / best / 1e9


def decode_weight_bytes(model: Transformer) -> int:
    """Bytes of weights one decode step reads: every linear (incl. the LM head) and norm.

    The embedding table is read one row per token, so it counts only when it *is* the LM head
    (tied and unquantized).
    """
    seen: dict[int, int] = {}
    for name, t in model.state_dict().items():
        if name == "model.embed_tokens.weight":
            continue
        if t.is_mkldnn:  # oneDNN-prepacked weights are opaque: no storage to dedupe by
            seen[id(t)] = t.numel() * t.element_size()
        else:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _model(spec_name: str, variant: str, model_path: Path | None) -> Transformer:
    model = build_model(load_model(spec_name), model_path=model_path, dtype=torch.bfloat16)
    base = variant.removesuffix("+compile")
    if variant not in ("bf16-F.linear", "bf16+compile"):
        quantize_model(model, base)
    return model


def decode_tokens_per_s(model: Transformer, batch: int, steps: int) -> float:
    """Output tokens/s of `steps` pure decode steps with `batch` running sequences."""
    limits = EngineLimits(
        max_num_seqs=batch,
        max_num_batched_tokens=max(batch * _PROMPT_TOKENS, 64),
        num_blocks=batch * (-(-(_PROMPT_TOKENS + steps + 4) // 16)),
        block_size=16,
    )
    engine = Engine(model, limits, compile=getattr(model, "compile_step", False))
    vocab = model.spec.vocab_size
    for b in range(batch):
        engine.add_request([(b * 31 + 7 * i) % vocab for i in range(_PROMPT_TOKENS)], steps + 3)
    engine.step()  # prefill every prompt in one step
    engine.step()  # one untimed decode step
    start = time.perf_counter()
    produced = 0
    for _ in range(steps):
        produced += sum(n for _, n in engine.step())
    return produced / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    """Run the side-by-side measurement and print the table; exit 1 if a target is missed."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--model-path", default=None, help="HF safetensors folder (default: auto)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument(
        "--compile", action="store_true", help="add torch.compile rows (minutes of compiling)"
    )
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    path = Path(args.model_path) if args.model_path else None
    if path is None and args.model == "smollm2-135m":
        from tuner.real_model import ensure_smollm2

        path = ensure_smollm2()
    variants = VARIANTS + (COMPILED_VARIANTS if args.compile else ())
    models = {v: _model(args.model, v, path) for v in variants}
    weight_bytes = {v: decode_weight_bytes(m) for v, m in models.items()}
    compile_s: dict[str, float] = {}
    with torch.inference_mode():
        for v, m in models.items():  # warm every kernel once; compile every shape class
            m.compile_step = v.endswith("+compile")
            start = time.perf_counter()
            for batch in BATCHES if m.compile_step else (1,):
                decode_tokens_per_s(m, batch, 2)
            if m.compile_step:
                compile_s[v] = time.perf_counter() - start
        bandwidth = [copy_bandwidth_gbps()]
        samples: dict[tuple[str, int], list[float]] = {
            (v, b): [] for v in variants for b in BATCHES
        }
        for _ in range(args.rounds):
            for batch in BATCHES:
                for v in variants:
                    samples[(v, batch)].append(decode_tokens_per_s(models[v], batch, args.steps))
            bandwidth.append(copy_bandwidth_gbps())
    tok_s = {key: statistics.median(vals) for key, vals in samples.items()}
    copy_gbps = statistics.median(bandwidth)
    print(
        f"model {args.model} ({'real weights' if path else 'random weights'}), "
        f"{torch.get_num_threads()} threads, load avg {os.getloadavg()[0]:.2f}, "
        f"copy bandwidth {copy_gbps:.1f} GB/s (median of {len(bandwidth)}), "
        f"median of {args.rounds} interleaved rounds x {args.steps} decode steps"
    )
    header = f"{'variant':<14}{'weights MB':>11}" + "".join(
        f"{f'b={b} tok/s':>13}" for b in BATCHES
    )
    print(header + f"{'x bf16 (b=1)':>14}{'BW bound %':>12}")
    fractions = {}
    for v in variants:
        gb = weight_bytes[v] / 1e9
        fractions[v] = gb * tok_s[(v, 1)] / copy_gbps
        row = f"{v:<14}{weight_bytes[v] / 1e6:>11.1f}"
        row += "".join(f"{tok_s[(v, b)]:>13.1f}" for b in BATCHES)
        row += f"{tok_s[(v, 1)] / tok_s[('bf16', 1)]:>14.2f}{100 * fractions[v]:>11.1f}%"
        print(row)
    for v, secs in compile_s.items():
        print(f"{v}: compile + autotune {secs:.1f} s (warm-up at b=1/8/32, not in tok/s)")
    speedup = tok_s[("int8-wo", 1)] / tok_s[("bf16", 1)]
    if args.compile:
        c_speedup = tok_s[("int8-wo+compile", 1)] / tok_s[("bf16+compile", 1)]
        best_int8 = max(tok_s[("int8-wo", 1)], tok_s[("int8-wo+compile", 1)])
        best_bf16 = max(tok_s[("bf16", 1)], tok_s[("bf16+compile", 1)])
        print(
            f"eager int8-wo / eager bf16: {speedup:.2f}x; compiled int8-wo / compiled bf16: "
            f"{c_speedup:.2f}x; best int8-wo / best bf16: {best_int8 / best_bf16:.2f}x"
        )
        speedup = best_int8 / best_bf16
    best = max(fractions, key=lambda v: fractions[v])
    ok_speed = speedup >= TARGET_INT8_SPEEDUP
    ok_bw = fractions[best] >= TARGET_BANDWIDTH_FRACTION
    print(
        f"best int8-wo / best bf16 at batch 1: {speedup:.2f}x (target >= {TARGET_INT8_SPEEDUP}) "
        f"{'PASS' if ok_speed else 'MISS'}; best bandwidth fraction {100 * fractions[best]:.1f}% "
        f"({best}, target >= {100 * TARGET_BANDWIDTH_FRACTION:.0f}%) {'PASS' if ok_bw else 'MISS'}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "model": args.model,
                    "copy_bandwidth_gbps": copy_gbps,
                    "weight_bytes": weight_bytes,
                    "decode_tokens_per_s": {f"{v}@{b}": t for (v, b), t in tok_s.items()},
                    "bandwidth_fraction": fractions,
                    "int8_speedup": speedup,
                    "compile_s": compile_s,
                },
                indent=2,
            )
        )
    return 0 if ok_speed and ok_bw else 1


if __name__ == "__main__":
    sys.exit(main())
