"""A deployment across GPUs and nodes: node profiles, and disaggregated prefill/decode pools.

A node profile says how GPUs are joined: how many sit in one server (or rack tray), how many one
scale-up domain joins (the GPU profile's `nvlink_domain`: 8 on HGX, 72 on an NVL72 rack), and
the scale-out NIC each GPU has (ConnectX-7 400 Gb/s, ConnectX-8 800 Gb/s) with its latency.

A disaggregated deployment runs prefill and decode on separate engine workers (xPyD): `x`
prefill workers and `y` decode workers, each an engine replica with its own layout (TP x
attention-DP, expert parallelism) and batch limits, handing each prompt's KV cache over the link
between them. Both pools run the same weights and KV dtype on the same engine (the KV a prefill
worker writes must be readable by the decode worker: vLLM's NIXL connector, SGLang's
`--disaggregation-transfer-backend` and TensorRT-LLM's cache transceiver all move the engine's own
KV blocks), so the two configs may differ only in layout and limits.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from tuner.knobs.models import Strict
from tuner.model_spec import Name
from tuner.specs import EngineConfig

__all__ = ["LAYOUT_FIELDS", "Deployment", "DeploymentFile", "NodeProfile", "Pool", "PoolFile"]

# What may differ between the prefill and the decode pool: layout and batch limits.
LAYOUT_FIELDS = frozenset(
    {
        "tensor_parallel_size",
        "data_parallel_size",
        "expert_parallel",
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "gpu_memory_utilization",
        "draft_model",
        "num_speculative_tokens",
    }
)
BITS_PER_BYTE = 8.0


class NodeProfile(Strict):
    """One server (or rack tray) of GPUs and the scale-out network each of its GPUs has."""

    name: Name = Field(description="Catalog name, e.g. hgx-h200")
    display_name: Name = Field(description="Vendor's system name")
    gpu: Name = Field(description="GPU profile the node holds (catalog name)")
    gpus_per_node: int = Field(ge=1, le=72, description="GPUs in one node")
    nic_gbps: float = Field(gt=0, le=3200, description="Scale-out NIC per GPU, Gb/s (bits)")
    nic_latency_us: float = Field(
        ge=0, le=1000, description="One-way latency of a scale-out transfer, microseconds"
    )
    source: str = Field(min_length=8, description="Datasheet URL")

    @property
    def nic_bytes_per_s(self) -> float:
        """Scale-out bandwidth of one GPU's NIC, bytes/s."""
        return self.nic_gbps * 1e9 / BITS_PER_BYTE


class Pool(Strict):
    """Identical engine workers doing one phase (prefill or decode) of every request."""

    workers: int = Field(ge=1, le=1024, description="Engine replicas in the pool")
    config: EngineConfig = Field(description="Each worker's engine variant (layout, limits)")

    @property
    def gpus_per_worker(self) -> int:
        """GPUs one worker occupies: TP x attention-DP."""
        return self.config.tensor_parallel_size * self.config.data_parallel_size

    @property
    def gpus(self) -> int:
        """GPUs the whole pool occupies."""
        return self.workers * self.gpus_per_worker


class Deployment(Strict):
    """Disaggregated serving: a prefill pool handing KV over to a decode pool."""

    prefill: Pool
    decode: Pool

    @model_validator(mode="after")
    def _same_weights(self) -> Deployment:
        p = self.prefill.config.model_dump()
        d = self.decode.config.model_dump()
        differ = sorted(k for k in p if k not in LAYOUT_FIELDS and p[k] != d[k])
        if differ:
            raise ValueError(
                "the prefill and decode pools must run the same weights, KV dtype and engine; "
                f"they differ in {', '.join(differ)}"
            )
        return self

    @property
    def gpus(self) -> int:
        """GPUs of both pools."""
        return self.prefill.gpus + self.decode.gpus

    def shape(self) -> str:
        """Compact layout, e.g. '2P(tp4) + 1D(tp8 ep)'."""
        return f"{_pool_text(self.prefill, 'P')} + {_pool_text(self.decode, 'D')}"


def _pool_text(pool: Pool, phase: str) -> str:
    c = pool.config
    parts = [f"tp{c.tensor_parallel_size}"]
    if c.data_parallel_size > 1:
        parts.append(f"dp{c.data_parallel_size}")
    if c.expert_parallel:
        parts.append("ep")
    return f"{pool.workers}{phase}({' '.join(parts)})"


class PoolFile(Strict):
    """A pool as a user writes it: its workers and what its layout changes from the variant."""

    workers: int = Field(ge=1, le=1024, description="Engine replicas in the pool")
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=1024)
    data_parallel_size: int | None = Field(default=None, ge=1, le=1024)
    expert_parallel: bool | None = None
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)

    def pool(self, base: EngineConfig) -> Pool:
        """The pool: `base` (the variant's knobs) with this file's layout on top."""
        changes = self.model_dump(exclude={"workers"}, exclude_none=True)
        config = EngineConfig(**{**base.model_dump(), **changes})
        return Pool(workers=self.workers, config=config)


class DeploymentFile(Strict):
    """A `--deployment` YAML: the prefill and decode pools, and optionally the node profile."""

    prefill: PoolFile
    decode: PoolFile
    node: Name | None = Field(default=None, description="Node profile (catalog name or YAML)")

    def build(self, base: EngineConfig) -> Deployment:
        """The deployment of the variant `base` laid out as this file says."""
        return Deployment(prefill=self.prefill.pool(base), decode=self.decode.pool(base))
