"""3.2.1 Scaled Dot-Product Attention, and on CPU the faster of torch's fused kernel and plain matmuls.

Shapes: B batch, H heads, T query length, S key length, K head size. The functions follow transformers'
attention interface (`module, query, key, value, attention_mask, scaling, dropout`) and return the output
(B,T,H,K) with the attention weights (B,H,T,S), or None where the kernel does not make them.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import AttentionInterface


def scaled_dot_product_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """3.2.1 softmax(QK^T / sqrt(d_k)) V: q (B,H,T,K), k/v (B,H,S,K), additive mask -> (B,T,H,K), (B,H,T,S)."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def sdpa_by_matmuls(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The "sdpa" attention, same masks (boolean, or none with `module.is_causal`), by 3.2.1's matmuls: out, weights."""
    query_length, key_length = query.shape[2], key.shape[2]
    if attention_mask is None and module.is_causal and query_length > 1:
        attention_mask = torch.ones(query_length, key_length, dtype=torch.bool, device=query.device)
        attention_mask = attention_mask.tril(key_length - query_length)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        additive = torch.zeros_like(attention_mask, dtype=query.dtype)
        attention_mask = additive.masked_fill_(~attention_mask, torch.finfo(query.dtype).min)
    return scaled_dot_product_attention(module, query, key, value, attention_mask, scaling, dropout)


def matmuls_beat_fused_cpu_kernel(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Where torch's fused CPU attention kernel is slower than plain matmuls (torch 2.13, fwd+bwd or decoding).

    bfloat16 up to 512 keys: 2-5x in training, 2-8x decoding a batch; float32 decoding steps of 16 or more
    sequences: 1.1-1.4x. The fused kernel wins on long float32 sequences and single-sentence decoding.
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
    """torch's SDPA, or sdpa_by_matmuls where matmuls_beat_fused_cpu_kernel says those are faster."""
    attention = sdpa_by_matmuls if matmuls_beat_fused_cpu_kernel(query, key) else sdpa_attention_forward
    return attention(module, query, key, value, attention_mask, **kwargs)


# Two `attn_implementation` names next to transformers' own, both on "sdpa" masks. A model's default stays "sdpa",
# torch's kernel, as for every model in transformers; hf_vanilla's training, evaluation and benchmark ask for
# AUTO_ATTENTION by name.
MATMUL_ATTENTION, AUTO_ATTENTION = "vanilla_sdpa_matmuls", "vanilla_sdpa_auto"
for _name, _function in ((MATMUL_ATTENTION, sdpa_by_matmuls), (AUTO_ATTENTION, sdpa_where_fastest)):
    AttentionInterface.register(_name, _function)
    AttentionMaskInterface.register(_name, sdpa_mask)
SDPA_MASKED = ("sdpa", MATMUL_ATTENTION, AUTO_ATTENTION)
