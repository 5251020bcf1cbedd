"""ModelSpec: the architecture numbers of a decoder-only transformer, dense or MoE, GQA or MLA.

Parameter counts follow the HF modeling code of each family: Llama/Qwen/Mistral (GQA, SwiGLU),
Mixtral/Qwen3-MoE (routed experts), DeepSeek-V3 (MLA, shared experts, first-k dense layers),
Llama-4 (shared expert, interleaved MoE layers) and gpt-oss (attention sinks, alternating
sliding-window layers, biased experts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from tuner.errors import InputError, control_reason, echo
from tuner.knobs.models import Strict

__all__ = ["ModelId", "ModelSpec", "Name", "check_model_id", "model_id_reason"]


def model_id_reason(text: str) -> str | None:
    """Why `text` cannot be a model id or path on a launcher's command line, or None."""
    if text.startswith("-"):
        # `vllm serve -x` or `--model-path --trust-remote-code` would read the id as an option.
        return "starts with '-', which a launcher reads as an option (write a path as ./-name)"
    return control_reason(text)


def check_model_id(text: str, what: str) -> str:
    """`text` when it can be a model id; else an InputError naming `what` and the problem."""
    if reason := model_id_reason(text):
        raise InputError(f"{what} {echo(text)} {reason}")
    return text


def _checked(reason: Callable[[str], str | None]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if problem := reason(value):
            raise PydanticCustomError("bad_name", problem)
        return value

    return check


# A name that reaches launch files, result files and the terminal (GPU and SLA names): checked
# where it enters, since a newline in it would start a line of its own in a YAML comment or a
# shell script (tuner.errors.control_reason); a model id besides never reads as an option.
Name = Annotated[str, AfterValidator(_checked(control_reason))]
ModelId = Annotated[str, AfterValidator(_checked(model_id_reason))]


class ModelSpec(Strict):
    """Architecture numbers of a decoder-only transformer, as in its HF config.json."""

    name: ModelId
    hf_id: ModelId | None = Field(default=None, description="Hugging Face repository id")
    family: Name = Field(default="llama", description="model_type of the HF config")
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int | None = Field(default=None, gt=0, description="Defaults to hidden/heads")
    intermediate_size: int = Field(
        gt=0, description="Dense MLP width (dense layers; per expert when no moe width is given)"
    )
    vocab_size: int = Field(gt=0)
    num_experts: int = Field(default=0, ge=0, description="Routed experts; 0 = dense model")
    num_experts_per_tok: int = Field(default=0, ge=0, description="Routed experts per token")
    moe_intermediate_size: int | None = Field(
        default=None, gt=0, description="Width of one routed expert; None = intermediate_size"
    )
    num_shared_experts: int = Field(
        default=0, ge=0, description="Always-active experts per MoE layer (moe width each)"
    )
    first_k_dense: int = Field(
        default=0, ge=0, description="Leading layers with a dense MLP (DeepSeek first_k_dense)"
    )
    moe_layer_step: int = Field(
        default=1, ge=1, description="Every n-th layer is MoE (Llama-4 interleave_moe_layer_step)"
    )
    expert_bias: bool = Field(default=False, description="Expert projections carry a bias")
    # Multi-head latent attention (DeepSeek-V2/V3): the cache holds one compressed latent
    # (kv_lora_rank) plus one shared RoPE key (qk_rope_head_dim) per token and layer.
    kv_lora_rank: int | None = Field(default=None, gt=0, description="MLA latent width")
    q_lora_rank: int | None = Field(default=None, gt=0, description="MLA query low-rank width")
    qk_rope_head_dim: int | None = Field(default=None, gt=0, description="MLA RoPE key width")
    qk_nope_head_dim: int | None = Field(default=None, gt=0, description="MLA non-RoPE q/k width")
    v_head_dim: int | None = Field(default=None, gt=0, description="MLA value head width")
    tie_word_embeddings: bool = False
    attention_bias: bool = Field(default=False, description="q/k/v projections carry a bias")
    # Qwen2 biases q/k/v only; Llama-style attention_bias (gpt-oss) biases o_proj as well.
    attention_out_bias: bool = Field(default=False, description="o_proj carries a bias")
    attention_sinks: bool = Field(default=False, description="Learned per-head sink logits")
    # Llama-4's chunked local attention (attention_chunk_size 8192 on its RoPE layers, 3 of every
    # 4; the NoPE layers are global) is written as sliding_window=8192 with sliding_window_layers
    # = the chunked layers: a chunked layer never needs more than the last 8192 tokens cached,
    # the bound a window gives (its mean attention span is half a window's, which nothing here
    # models).
    sliding_window: int | None = Field(default=None, gt=0)
    sliding_window_layers: int | None = Field(
        default=None, ge=0, description="Layers using the window; None = all when a window is set"
    )
    num_mtp_layers: int = Field(
        default=0, ge=0, description="Multi-token-prediction heads shipped (not in num_params)"
    )
    max_context: int = Field(gt=0, description="max_position_embeddings")
    rope_theta: float = Field(default=10000.0, gt=0, description="RoPE base frequency")
    rms_norm_eps: float = Field(default=1e-5, gt=0)
    published_params_b: float | None = Field(
        default=None, gt=0, description="Parameter count the publisher states, billions"
    )
    published_active_params_b: float | None = Field(
        default=None, gt=0, description="Active parameters per token the publisher states, billions"
    )

    @model_validator(mode="after")
    def _check_shape(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} must be in 1..num_experts="
                f"{self.num_experts}"
            )
        if not self.num_experts and (self.num_experts_per_tok or self.num_shared_experts):
            raise ValueError(
                "num_experts_per_tok / num_shared_experts are set but num_experts is 0 (dense)"
            )
        mla = (self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim)
        if self.kv_lora_rank is not None and None in mla:
            raise ValueError(
                "kv_lora_rank (MLA) needs qk_rope_head_dim, qk_nope_head_dim and v_head_dim"
            )
        if self.num_experts and self.num_moe_layers == 0:
            raise ValueError(
                f"num_experts={self.num_experts} but no layer is MoE (first_k_dense="
                f"{self.first_k_dense}, moe_layer_step={self.moe_layer_step}, "
                f"num_layers={self.num_layers})"
            )
        if self.sliding_window_layers is not None and self.sliding_window is None:
            raise ValueError(
                f"sliding_window_layers={self.sliding_window_layers} needs a sliding_window"
            )
        if (self.sliding_window_layers or 0) > self.num_layers:
            raise ValueError(
                f"sliding_window_layers={self.sliding_window_layers} > num_layers={self.num_layers}"
            )
        return self

    # ------------------------------------------------------------------ attention

    @property
    def head_dim_(self) -> int:
        """Per-head dimension (explicit or hidden_size / heads); the q/k width under MLA."""
        if self.uses_mla:
            return (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def uses_mla(self) -> bool:
        """Whether attention is multi-head latent attention (a compressed KV cache)."""
        return self.kv_lora_rank is not None

    @property
    def mla_latent_dim(self) -> int:
        """Elements MLA caches per token and layer: the latent plus the shared RoPE key."""
        return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)

    @property
    def attention_params_per_layer(self) -> int:
        """Parameters of the attention projections in one layer (biases and sinks included)."""
        d, h = self.hidden_size, self.num_attention_heads
        sinks = h if self.attention_sinks else 0
        out_bias = d if self.attention_out_bias else 0
        if self.uses_mla:
            # DeepSeek: q_a (d -> q rank) then q_b, or one q_proj without a q rank; kv_a holds
            # the latent plus the shared RoPE key; kv_b expands the latent to per-head nope-k
            # and v. The two latent RMSNorms are counted in norm_params.
            rope, v = self.qk_rope_head_dim or 0, self.v_head_dim or 0
            q_width = h * self.head_dim_
            q = (d + q_width) * self.q_lora_rank if self.q_lora_rank else d * q_width
            rank = self.kv_lora_rank or 0
            kv = d * (rank + rope) + rank * h * ((self.qk_nope_head_dim or 0) + v)
            return q + kv + h * v * d + out_bias + sinks
        hd = self.head_dim_
        q = h * hd
        kv = self.num_kv_heads * hd
        bias = (q + 2 * kv) if self.attention_bias else 0
        return d * q + 2 * d * kv + q * d + bias + out_bias + sinks

    @property
    def num_sliding_layers(self) -> int:
        """Layers whose attention only sees the last `sliding_window` tokens."""
        if self.sliding_window is None:
            return 0
        if self.sliding_window_layers is None:
            return self.num_layers
        return self.sliding_window_layers

    # ------------------------------------------------------------------ MLP / experts

    @property
    def is_moe(self) -> bool:
        """Whether the MLP is a mixture of experts."""
        return self.num_experts > 1

    @property
    def expert_intermediate_size(self) -> int:
        """Width of one routed (and shared) expert."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        if not self.num_experts:
            return 0
        # Layers i in [first_k_dense, num_layers) with (i + 1) % step == 0, counted in O(1): a
        # config may claim any number of layers before validation refuses it.
        step, first = self.moe_layer_step, min(self.first_k_dense, self.num_layers)
        return self.num_layers // step - first // step

    @property
    def num_dense_layers(self) -> int:
        """Layers whose MLP is one dense gated MLP."""
        return self.num_layers - self.num_moe_layers

    @property
    def mlp_params_per_expert(self) -> int:
        """Parameters of one routed expert: gate, up, down (and their biases)."""
        d, w = self.hidden_size, self.expert_intermediate_size
        return 3 * d * w + ((2 * w + d) if self.expert_bias else 0)

    @property
    def dense_mlp_params(self) -> int:
        """Parameters of the gated MLP of one dense layer."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def shared_expert_params(self) -> int:
        """Parameters of the always-active shared experts of one MoE layer."""
        return self.num_shared_experts * 3 * self.hidden_size * self.expert_intermediate_size

    @property
    def router_params(self) -> int:
        """Router weights of one MoE layer (plus its bias where experts carry biases)."""
        return self.hidden_size * self.num_experts + (self.num_experts if self.expert_bias else 0)

    @property
    def routed_expert_params(self) -> int:
        """Parameters of every routed expert over all MoE layers."""
        return self.num_moe_layers * self.num_experts * self.mlp_params_per_expert

    @property
    def mlp_params_total(self) -> int:
        """All MLP parameters of all layers (every expert, shared experts, routers)."""
        moe = self.routed_expert_params + self.num_moe_layers * (
            self.shared_expert_params + self.router_params
        )
        return self.num_dense_layers * self.dense_mlp_params + moe

    @property
    def active_mlp_params_total(self) -> int:
        """MLP parameters one token touches over all layers."""
        per_moe = (
            self.num_experts_per_tok * self.mlp_params_per_expert
            + self.shared_expert_params
            + self.router_params
        )
        return self.num_dense_layers * self.dense_mlp_params + self.num_moe_layers * per_moe

    def mtp_module(self) -> ModelSpec | None:
        """The multi-token-prediction module as a model of its own (None without one): its
        decoder layers, of the model's last kind (a MoE layer on DeepSeek-V3/R1), reading and
        writing through the target's embedding and LM head. Its small [embedding; hidden] ->
        hidden projection is left out."""
        if not self.num_mtp_layers:
            return None
        return self.model_copy(
            update={
                "name": f"{self.name}-mtp",
                "hf_id": None,
                "num_layers": self.num_mtp_layers,
                "first_k_dense": 0,
                "moe_layer_step": 1,
                "num_mtp_layers": 0,
                "sliding_window_layers": None,
                "sliding_window": None,
                "published_params_b": None,
                "published_active_params_b": None,
            }
        )

    # ------------------------------------------------------------------ totals

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (once if tied)."""
        emb = self.vocab_size * self.hidden_size
        return emb if self.tie_word_embeddings else 2 * emb

    @property
    def norm_params(self) -> int:
        """RMSNorm weights: two per layer plus the final norm (and MLA's latent norms)."""
        mla = (self.kv_lora_rank or 0) + (self.q_lora_rank or 0) if self.uses_mla else 0
        return (2 * self.num_layers + 1) * self.hidden_size + self.num_layers * mla

    @property
    def num_params(self) -> int:
        """Total parameter count (MTP heads excluded, as publishers count them)."""
        return (
            self.num_layers * self.attention_params_per_layer
            + self.mlp_params_total
            + self.embedding_params
            + self.norm_params
        )

    @property
    def num_active_params(self) -> int:
        """Parameters touched per token (differs from num_params only for MoE)."""
        # Embedding and LM head both count, as Mistral, Qwen, DeepSeek and Meta state their
        # active figures; OpenAI's gpt-oss figures leave the input embedding out.
        return (
            self.num_layers * self.attention_params_per_layer
            + self.active_mlp_params_total
            + self.embedding_params
            + self.norm_params
        )

    def kv_elements_per_token(self) -> int:
        """Cached elements per token over all layers: K and V heads, or MLA's latent."""
        if self.uses_mla:
            return self.num_layers * self.mla_latent_dim
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim_
