"""KV-cache capacity arithmetic: bytes per token from a model's shape, tokens from GPU memory."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from runners.input_model import InputModel

GIB = 1024**3


class ModelShape(InputModel):
    """The parts of a model's shape that set its KV-cache footprint."""

    model_config = ConfigDict(frozen=True)

    layers: int = Field(gt=0)
    kv_heads: int = Field(gt=0, description="key/value heads (GQA groups)")
    head_dim: int = Field(gt=0)
    dtype_bytes: int = Field(default=2, gt=0, description="bytes per element: 2 for fp16/bf16")
    weight_bytes: float = Field(ge=0, description="model weights in bytes, all GPUs together")

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V per token across all layers: 2 * layers * kv_heads * head_dim * dtype."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


class GPUBudget(InputModel):
    """Memory an instance may use: ``gpus * gpu_memory_gib * memory_fraction``."""

    model_config = ConfigDict(frozen=True)

    gpus: int = Field(default=1, gt=0)
    gpu_memory_gib: float = Field(gt=0)
    memory_fraction: float = Field(default=0.9, gt=0, le=1)
    activation_reserve_gib: float = Field(default=0.0, ge=0, description="memory kept for activations")


def kv_capacity_tokens(shape: ModelShape, budget: GPUBudget, block_size: int) -> int:
    """Tokens of KV cache that fit after weights and reserve, rounded down to whole blocks.

    Returns 0 or less when the weights alone do not fit; callers report that as an error.
    """
    usable = budget.gpus * budget.gpu_memory_gib * GIB * budget.memory_fraction
    free = usable - shape.weight_bytes - budget.activation_reserve_gib * GIB
    tokens = int(free // shape.kv_bytes_per_token)
    return (tokens // block_size) * block_size
