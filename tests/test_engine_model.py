"""Reference engine model: chunked prefill exactness, batching, safetensors loading, HF parity."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _engine_fixtures import prompts, tiny_model, tiny_spec

from tuner.engine.generate import Engine, EngineLimits, prefill_logits, run_to_completion
from tuner.engine.weights import build_model
from tuner.errors import InputError

# fp32 chunked vs one-shot prefill: same maths, different reduction order in attention.
CHUNK_ATOL = 1e-4


@pytest.mark.parametrize("chunk", [1, 5, 16, 33])
@pytest.mark.parametrize("moe", [False, True])
def test_chunked_prefill_matches_one_shot(chunk: int, moe: bool) -> None:
    spec = tiny_spec(num_experts=4, num_experts_per_tok=2) if moe else tiny_spec()
    model = tiny_model(spec)
    tokens = prompts([45])[0]
    one_shot = prefill_logits(model, tokens)
    chunked = prefill_logits(model, tokens, chunk_size=chunk)
    assert one_shot.shape == (45, spec.vocab_size)
    assert torch.allclose(one_shot, chunked, atol=CHUNK_ATOL, rtol=0)


def test_continuous_batching_matches_one_request_at_a_time() -> None:
    model = tiny_model()
    ps = prompts([7, 40, 3, 25, 18])
    alone = [run_to_completion(Engine(model, EngineLimits()), [p], 10)[0] for p in ps]
    # 2 concurrent sequences and a 12-token budget force chunking, queueing and mixed steps.
    batched = run_to_completion(
        Engine(model, EngineLimits(max_num_seqs=2, max_num_batched_tokens=12)), ps, 10
    )
    assert batched == alone
    assert len({tuple(x) for x in alone}) > 1  # the prompts lead to different outputs


def test_preemption_under_block_pressure_keeps_outputs() -> None:
    model = tiny_model()
    ps = prompts([30, 30, 30])
    alone = [run_to_completion(Engine(model, EngineLimits()), [p], 12)[0] for p in ps]
    engine = Engine(model, EngineLimits(max_num_seqs=3, num_blocks=9, block_size=8))
    assert run_to_completion(engine, ps, 12) == alone
    assert engine.scheduler.preemptions > 0


def test_safetensors_directory_round_trip(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    source = tiny_model(seed=3, fuse=False)
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"))
    loaded = build_model(source.spec, model_path=tmp_path, dtype=torch.float32, seed=99)
    assert loaded.model.layers[0].self_attn.fused  # loads HF names, then fuses
    tokens = prompts([20])[0]
    assert torch.equal(prefill_logits(source, tokens), prefill_logits(loaded, tokens))


def test_safetensors_shape_mismatch_is_an_input_error(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file(tiny_model(fuse=False).state_dict(), str(tmp_path / "model.safetensors"))
    with pytest.raises(InputError, match="shape"):
        build_model(tiny_spec(intermediate_size=96), model_path=tmp_path)
    with pytest.raises(InputError, match="no \\*.safetensors"):
        build_model(tiny_spec(), model_path=tmp_path / "missing")


def test_matches_transformers_llama() -> None:
    transformers = pytest.importorskip("transformers")
    spec = tiny_spec(rope_theta=50000.0, rms_norm_eps=1e-6)
    ours = tiny_model(spec, seed=5, fuse=False)
    cfg = transformers.LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_kv_heads,
        rope_theta=spec.rope_theta,
        rms_norm_eps=spec.rms_norm_eps,
        max_position_embeddings=spec.max_context,
        tie_word_embeddings=False,
    )
    ref = transformers.LlamaForCausalLM(cfg).eval()
    ref.load_state_dict(ours.state_dict(), strict=True)
    tokens = prompts([24])[0]
    with torch.no_grad():
        expected = ref(torch.tensor([tokens])).logits[0]
    assert torch.allclose(prefill_logits(ours, tokens), expected, atol=1e-3, rtol=1e-4)
    assert torch.allclose(prefill_logits(ours.fuse_projections(), tokens), expected, atol=1e-3)
