"""MoE, MLA and hybrid Hugging Face configs: each published layout reads to its catalog card, and
one the reader does not understand is refused in one line naming the field.

The fixtures in tests/data/hf_configs/ hold each repository's config.json keys (README there names
the repositories).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner import catalog
from tuner.cli import app
from tuner.errors import InputError
from tuner.hf_config import spec_fields
from tuner.model_spec import ModelSpec

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parent / "data" / "hf_configs"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))
# Everything but identity and the publisher's figures: what the config.json determines.
ARCH_FIELDS = [
    f
    for f in ModelSpec.model_fields
    if f not in {"name", "hf_id", "published_params_b", "published_active_params_b"}
]

# Totals: 2%, as for every card (tests/test_catalog_data.py). Publishers round to two or three
# figures, and the worst case here, Llama-4 Scout at -1.1%, is the ~0.9B vision encoder Meta's
# 109B includes and a text-only card leaves out.
TOTAL_REL_TOL = 0.02
# Active: 3%. The figures have two significant digits (3.3B, 17B, 37B), which alone is up to 1.5%
# of rounding; DeepSeek's 37B against 37.55B computed is the widest gap (+1.5%).
ACTIVE_REL_TOL = 0.03

runner = CliRunner()


def _fixture(name: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    assert isinstance(data, dict)
    return data


def test_every_new_architecture_has_a_fixture() -> None:
    assert set(NAMES) >= {
        "mixtral-8x7b",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "deepseek-v3",
        "deepseek-r1",
        "gpt-oss-20b",
        "gpt-oss-120b",
        "llama-4-scout",
        "llama-4-maverick",
    }


# ----------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("name", NAMES)
def test_fixture_reads_to_the_catalog_card(name: str) -> None:
    loaded = catalog.load_model(str(FIXTURES / f"{name}.json"))
    card = catalog.load_model(name)
    assert {f: getattr(loaded, f) for f in ARCH_FIELDS} == {
        f: getattr(card, f) for f in ARCH_FIELDS
    }
    assert loaded.num_params == card.num_params
    assert loaded.num_active_params == card.num_active_params


@pytest.mark.parametrize(
    ("name", "moe_layers", "dense_layers", "sliding_layers"),
    [
        ("qwen3-30b-a3b", 48, 0, 0),
        ("deepseek-v3", 58, 3, 0),
        ("gpt-oss-20b", 24, 0, 12),
        ("gpt-oss-120b", 36, 0, 18),
        ("llama-4-scout", 48, 0, 36),  # chunked attention on the RoPE layers
        ("llama-4-maverick", 24, 24, 36),  # interleave_moe_layer_step 2
    ],
)
def test_layer_layout(name: str, moe_layers: int, dense_layers: int, sliding_layers: int) -> None:
    spec = catalog.load_model(str(FIXTURES / f"{name}.json"))
    assert (spec.num_moe_layers, spec.num_dense_layers) == (moe_layers, dense_layers)
    assert spec.num_sliding_layers == sliding_layers


# ----------------------------------------------------------------------------- parameter counts

CARDS = [catalog.load_model(n) for n in NAMES]


@pytest.mark.parametrize("card", CARDS, ids=lambda m: m.name)
def test_total_params_match_the_publisher(card: ModelSpec) -> None:
    assert card.published_params_b is not None
    assert card.num_params / 1e9 == pytest.approx(card.published_params_b, rel=TOTAL_REL_TOL)


@pytest.mark.parametrize(
    "card", [c for c in CARDS if c.published_active_params_b], ids=lambda m: m.name
)
def test_active_params_match_the_publisher(card: ModelSpec) -> None:
    active = card.num_active_params
    if card.family == "gpt_oss":
        # OpenAI's active figure leaves the input embedding out (a lookup reads one row).
        active -= card.vocab_size * card.hidden_size
    assert active / 1e9 == pytest.approx(card.published_active_params_b, rel=ACTIVE_REL_TOL)


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"), [("gpt-oss-20b", 20.91, 3.61), ("gpt-oss-120b", 116.83, 5.13)]
)
def test_gpt_oss_matches_the_model_card_to_the_ten_million(
    name: str, total_b: float, active_b: float
) -> None:
    # The gpt-oss model card's parameter table states three significant decimals: biases, sinks
    # and the router bias are all in these.
    card = catalog.load_model(name)
    assert card.num_params / 1e9 == pytest.approx(total_b, abs=0.01)
    embedding = card.vocab_size * card.hidden_size
    assert (card.num_active_params - embedding) / 1e9 == pytest.approx(active_b, abs=0.01)


def test_mtp_layers_are_read_but_not_counted() -> None:
    spec = catalog.load_model(str(FIXTURES / "deepseek-v3.json"))
    assert spec.num_mtp_layers == 1
    assert spec.num_params == spec.model_copy(update={"num_mtp_layers": 0}).num_params


# ----------------------------------------------------------------------------- MLA cache


def test_mla_caches_the_latent_and_the_rope_key() -> None:
    spec = catalog.load_model(str(FIXTURES / "deepseek-v3.json"))
    assert spec.uses_mla and spec.mla_latent_dim == 512 + 64
    assert spec.kv_elements_per_token() == 61 * (512 + 64)


@given(
    heads=st.integers(1, 256),
    layers=st.integers(1, 128),
    rank=st.sampled_from([128, 256, 512, 1024]),
    rope=st.sampled_from([32, 64, 128]),
)
def test_mla_kv_per_token_ignores_the_head_count(
    heads: int, layers: int, rank: int, rope: int
) -> None:
    def spec(n_heads: int) -> ModelSpec:
        cfg = {
            **_fixture("deepseek-v3"),
            "num_attention_heads": n_heads,
            "num_key_value_heads": n_heads,  # DeepSeek states heads here; MLA has no KV heads
            "num_hidden_layers": layers,
            "first_k_dense_replace": min(3, layers - 1),
            "kv_lora_rank": rank,
            "qk_rope_head_dim": rope,
        }
        return ModelSpec.model_validate(spec_fields(cfg, "config.json", "mla"))

    many, one = spec(heads), spec(1)
    assert many.kv_elements_per_token() == layers * (rank + rope)
    assert many.kv_elements_per_token() == one.kv_elements_per_token()


# ----------------------------------------------------------------------------- refused layouts


def _mixtral_renamed() -> dict[str, Any]:
    cfg = _fixture("mixtral-8x7b")
    cfg["n_experts"] = cfg.pop("num_local_experts")
    return cfg


_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
}

# (config, the field the one error line must name)
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "expert count under a name mixtral does not use": (_mixtral_renamed(), "n_experts"),
    "experts on a dense family": ({**_LLAMA, "num_local_experts": 8}, "num_local_experts"),
    "unsupported MoE family": (
        {**_LLAMA, "model_type": "olmoe", "num_experts": 64, "num_experts_per_tok": 8},
        "num_experts",
    ),
    "latent attention on a dense family": ({**_LLAMA, "kv_lora_rank": 512}, "kv_lora_rank"),
    "hybrid model_type": (
        {**_LLAMA, "model_type": "qwen3_next", "layer_types": ["linear_attention"] * 2},
        "model_type",
    ),
    "mamba layer_types": (
        {**_LLAMA, "model_type": "newmodel", "layer_types": ["mamba", "full_attention"]},
        "layer_types",
    ),
    "hybrid pattern key": (
        {**_LLAMA, "model_type": "newmodel", "hybrid_override_pattern": "M-M*"},
        "hybrid_override_pattern",
    ),
    "mamba state key": ({**_LLAMA, "model_type": "newmodel", "mamba_d_state": 16}, "mamba_d_state"),
    "deepseek moe_layer_freq": ({**_fixture("deepseek-v3"), "moe_layer_freq": 2}, "moe_layer_freq"),
    "qwen3_moe dense layers in the middle": (
        {**_fixture("qwen3-30b-a3b"), "mlp_only_layers": [3, 7]},
        "mlp_only_layers",
    ),
    "llama4 moe_layers off the step": (
        {
            **_fixture("llama-4-maverick"),
            "text_config": {**_fixture("llama-4-maverick")["text_config"], "moe_layers": [0, 2]},
        },
        "moe_layers",
    ),
    "gpt_oss top-k keys disagree": (
        {**_fixture("gpt-oss-20b"), "experts_per_token": 2},
        "experts_per_token",
    ),
    "mixtral without its expert count": (
        {k: v for k, v in _fixture("mixtral-8x7b").items() if k != "num_local_experts"},
        "num_local_experts",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unknown_layouts_are_one_input_error_naming_the_field(case: str, tmp_path: Path) -> None:
    cfg, field = REFUSED[case]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as err:
        catalog.load_model(str(path))
    line = str(err.value)
    assert "\n" not in line and line.startswith(str(path))
    assert f"field '{field}'" in line, line


def test_refusals_say_what_is_supported(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(REFUSED["unsupported MoE family"][0]))
    with pytest.raises(InputError, match="supported: dense decoder-only families and mixtral"):
        catalog.load_model(str(path))


# ----------------------------------------------------------------------------- CLI


def _fails_in_one_line(result: Any) -> str:
    """Exit 2 (bad input) with exactly one `error:` line and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "case", ["unsupported MoE family", "hybrid model_type", "mamba layer_types"]
)
@pytest.mark.parametrize("command", ["predict", "show"])
def test_cli_refuses_an_unknown_layout_in_one_line(case: str, command: str, tmp_path: Path) -> None:
    cfg, field = REFUSED[case]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    argv = {
        "predict": ["predict", "--model", str(path), "--gpu", "h200-sxm"],
        "show": ["show", "model", str(path)],
    }[command]
    assert f"field '{field}'" in _fails_in_one_line(runner.invoke(app, argv))


@pytest.mark.parametrize("name", ["deepseek-v3", "gpt-oss-20b", "llama-4-maverick"])
def test_cli_reads_the_published_configs(name: str) -> None:
    path = str(FIXTURES / f"{name}.json")
    shown = runner.invoke(app, ["show", "model", path])
    assert shown.exit_code == 0, shown.output
    assert "num_experts:" in shown.output
    predicted = runner.invoke(app, ["predict", "--model", path, "--gpu", "h200-sxm"])
    assert predicted.exit_code == 0, predicted.output
