"""On CPU, the faster of torch's fused attention kernel and 3.2.1's plain matmuls,
as two `attn_implementation`s.

Both take "sdpa"'s masks. MATMUL_ATTENTION is the model's own formula (modeling_vanilla's
`scaled_dot_product_attention`, which registers it here); AUTO_ATTENTION chooses between it and torch's kernel
by `matmuls_beat_fused_cpu_kernel`. A model's default stays "sdpa", torch's kernel, as for every model in
transformers; hf_vanilla's training, evaluation and benchmark ask for AUTO_ATTENTION by name. Shapes: B batch,
H heads, T query length, S key length, K head size.
"""

from collections.abc import Callable

import torch
from torch import nn
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

MATMUL_ATTENTION, AUTO_ATTENTION = "vanilla_sdpa_matmuls", "vanilla_sdpa_auto"
SDPA_MASKED = ("sdpa", MATMUL_ATTENTION, AUTO_ATTENTION)


def matmuls_beat_fused_cpu_kernel(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Where torch's fused CPU attention kernel is slower than plain matmuls, as measured with torch 2.13
    (training and decoding; the ratios are in docs/testing.md): bfloat16 up to 512 keys, and float32 decoding
    steps of 16 or more sequences. The fused kernel wins on long float32 sequences and single-sentence
    decoding.
    """
    if query.device.type != "cpu" or key.shape[2] > 512:
        return False
    return query.dtype != torch.float32 or (query.shape[2] == 1 and query.shape[0] >= 16)


def sdpa_where_fastest(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """torch's SDPA, or MATMUL_ATTENTION where matmuls_beat_fused_cpu_kernel says that
    is faster: q (B,H,T,K)."""
    name = MATMUL_ATTENTION if matmuls_beat_fused_cpu_kernel(query, key) else "sdpa"
    return ALL_ATTENTION_FUNCTIONS[name](module, query, key, value, attention_mask, **kwargs)


def register_cpu_attention(matmul_attention: Callable) -> None:
    """Name `matmul_attention` (3.2.1 by matmuls, on "sdpa" masks) MATMUL_ATTENTION,
    sdpa_where_fastest AUTO_ATTENTION."""
    for name, function in ((MATMUL_ATTENTION, matmul_attention), (AUTO_ATTENTION, sdpa_where_fastest)):
        AttentionInterface.register(name, function)
        AttentionMaskInterface.register(name, sdpa_mask)
