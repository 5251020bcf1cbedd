"""Write benchmarks/data/traces/sessions_sample.jsonl, the small trace the tests and docs use.

    python scripts/make_trace_sample.py            # rewrite the sample
    python scripts/make_trace_sample.py --check    # exit 1 when the file differs

The sample is synthetic: no production trace is copied (none could be downloaded where it was
made). It is written in the Mooncake trace format (kvcache-ai/Mooncake, `traces/`: one JSON
object per line, `timestamp` in ms, `input_length`, `output_length`, `hash_ids` of 512-token
blocks) from the `chat` session preset of `tuner/bench/sessions.py` with 512-token blocks:
multi-turn sessions sharing one system prompt, each turn's prompt the session so far plus new
input, so its hash ids repeat exactly where the prompts share a prefix. Same seed, same bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tuner.bench.sessions import PRESETS, session_trace
from tuner.bench.trace import MOONCAKE_BLOCK_TOKENS

OUT = (
    Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "traces" / "sessions_sample.jsonl"
)
SPEC = PRESETS["chat"].model_copy(
    update={
        "preset": "chat",
        "sessions": 40,
        "session_rate_per_s": 0.5,
        "system_prompt_tokens": 1500,
        "block_tokens": MOONCAKE_BLOCK_TOKENS,
        "seed": 32,
    }
)


def sample_text() -> str:
    """The sample trace, one Mooncake JSON object per line."""
    trace = session_trace(SPEC)
    assert trace.blocks is not None
    lines = []
    for i in range(trace.count):
        row = {
            "timestamp": round(float(trace.arrival_s[i]) * 1000),
            "input_length": int(trace.input_tokens[i]),
            "output_length": int(trace.output_tokens[i]),
            "hash_ids": trace.blocks.of(i),
        }
        lines.append(json.dumps(row, separators=(", ", ": ")))
    return "\n".join(lines) + "\n"


def main() -> int:
    """Write (or with --check compare) the sample; 1 when --check finds it stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = sample_text()
    if args.check:
        return 0 if OUT.read_text(encoding="utf-8") == text else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({text.count(chr(10))} requests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
