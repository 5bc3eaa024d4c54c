"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), in the order of its sections.

3.2 attention: 3.2.1 the formula, 3.2.2 multi-head attention, 3.2.3 the masks as -inf; 3.3 the feed-forward
layer; 3.4 the embeddings, 3.5 the positional encoding; 3.1 the residual connections, layers and stacks that
assemble them; 3 the encoder-decoder, with 3.4's one matrix shared by both embeddings and the pre-softmax
projection. Each module's forward is its equation; the machinery around it (kernel choice, the key/value
cache, input checks, the masks' set-up) sits in small named helpers beside it, and the departures from the
paper (word dropout, LayerDrop, pre-LN) are switches of the config, off by default. Below the paper, the two
CPU attention kernels' names (attention_kernels.py); the transformers versions' differences live in
compat.py. Imports only torch, transformers (with huggingface_hub, its own dependency) and the files beside
it, so a saved model directory can carry them and load with `trust_remote_code=True`. Shapes: B batch,
S source length, T target length, L either, D d_model, H heads, K head size, V vocabulary.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, is_torchdynamo_compiling
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .attention_kernels import SDPA_MASKED, register_cpu_attention
from .compat import CACHE_NAME, takes_cache_by_either_name
from .configuration_vanilla import VanillaTransformerConfig
from .hub import PipelineCodeAndCardMixin


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
    """3.2.1 Attention(Q, K, V) = softmax(QK^T / sqrt(d_k)) V.

    q (B,H,T,K), k/v (B,H,S,K) -> (B,T,H,K), weights (B,H,T,S). The "eager" attention of transformers'
    interface; `attention_mask` as `mask_illegal_connections` takes it.
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # scaling = 1 / sqrt(d_k)
    scores = mask_illegal_connections(scores, attention_mask, module.is_causal)
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


class MultiHeadAttention(nn.Module):
    """3.2.2 MultiHead(Q, K, V) = Concat(head_1..head_h) W^O: (B,T,D) [, (B,S,D)] -> (B,T,D), weights."""

    def __init__(
        self, config: VanillaTransformerConfig, layer_idx: int, is_causal: bool, is_cross_attention: bool
    ):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal  # read by the kernels when masking_utils skips an all-visible causal mask
        self.is_cross_attention = is_cross_attention
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        d_model = config.d_model
        # The paper's projections W^Q, W^K, W^V, W^O have no bias. Fused into one matmul where inputs
        # coincide.
        if is_cross_attention:
            self.q_proj = nn.Linear(d_model, d_model, bias=False)
            self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=False)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        query, key, value = self._project(hidden_states, key_value_states, cache)  # Q W_i^Q, K W_i^K, V W_i^V
        dropout = self.dropout if self.training else 0.0
        # head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) for all i at once: (B,T,H,K)
        heads, weights = self._attention(kwargs)(
            self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
        )
        concatenated = heads.reshape(*hidden_states.shape[:-1], -1)  # Concat(head_1..head_h): (B,T,D)
        return self.out_proj(concatenated), weights  # W^O

    def _attention(self, kwargs: dict) -> Callable:
        """The kernel computing 3.2.1: "eager" is the formula above; "sdpa", flash and flex attention are
        transformers' kernels for it."""
        implementation = self.config._attn_implementation
        if implementation in SDPA_MASKED and kwargs.get("output_attentions", self.config.output_attentions):
            return scaled_dot_product_attention  # the formula takes "sdpa" masks and returns the weights
        return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, scaled_dot_product_attention)

    def _split_heads(self, states: torch.Tensor, parts: int) -> tuple[torch.Tensor, ...]:
        """(B, L, parts*D) -> `parts` tensors of (B, H, L, K)."""
        batch, length, _ = states.shape
        return states.view(batch, length, parts, -1, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)

    def _project(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None,
        cache: EncoderDecoderCache | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (B,H,T,K) of `hidden_states`; keys and values (B,H,S,K) of `key_value_states`
        (cross-attention) or `hidden_states`, after those of earlier decoding steps, which the cache keeps."""
        if not self.is_cross_attention:
            query, key, value = self._split_heads(self.qkv_proj(hidden_states), 3)
            if cache is not None:
                key, value = cache.self_attention_cache.update(key, value, self.layer_idx)
            return query, key, value
        (query,) = self._split_heads(self.q_proj(hidden_states), 1)
        return query, *self._memory_keys_and_values(key_value_states, cache)

    def _memory_keys_and_values(
        self, key_value_states: torch.Tensor, cache: EncoderDecoderCache | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's keys and values (B,H,S,K) of the encoder output, computed once per decoding: the
        encoder output does not change while decoding, the cache keeps them after the first step."""
        if cache is not None and cache.is_updated.get(self.layer_idx):
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            return layer.keys, layer.values
        key, value = self._split_heads(self.kv_proj(key_value_states), 2)
        if cache is not None:
            key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return key, value


def mask_illegal_connections(
    scores: torch.Tensor, attention_mask: torch.Tensor | None, is_causal: bool
) -> torch.Tensor:
    """3.2.3 Set to -inf the scores of illegal connections, so that softmax gives them weight 0: (B,H,T,S).

    Illegal are padding keys and, in the decoder's self-attention, the positions after the query's own.
    `attention_mask` (B or 1, 1, T, S) comes from transformers' masking_utils: True where query t may see
    key s (the "sdpa" masks), or already 0 or -inf to add (the "eager" masks); None where every key is
    visible, or where the decoder's causal mask is left to `is_causal`.
    """
    query_length, key_length = scores.shape[-2:]
    if attention_mask is None and is_causal and query_length > 1:
        # The last T of S positions are the queries': query t sees the cached keys and its own and earlier
        # ones.
        attention_mask = torch.ones(query_length, key_length, dtype=torch.bool, device=scores.device)
        attention_mask = attention_mask.tril(key_length - query_length)
    if attention_mask is None:
        return scores
    if attention_mask.dtype == torch.bool:
        # -inf as the dtype's lowest number, as transformers' "eager" masks have it: softmax gives it the same
        # weight 0, and a query left with no key (a fully padded row) gets finite weights rather than NaN.
        return scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    return scores + attention_mask


class PositionwiseFeedForward(nn.Module):
    """3.3 FFN(x) = max(0, x W_1 + b_1) W_2 + b_2: (B, L, D) -> (B, L, D)."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = F.relu(self.fc1(hidden_states))
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class TokenEmbedding(nn.Module):
    """3.4 Embedding * sqrt(d_model) plus 3.5 positional encoding, then dropout: ids (B,L) -> (B,L,D).

    Or embeddings (B,L,D) in place of the ids. `word_dropout` (training only, a departure from the paper):
    each token's embedding zeroed with this probability before its position is added (`source_word_dropout` /
    `target_word_dropout`)."""

    def __init__(self, config: VanillaTransformerConfig, word_dropout: float = 0.0):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model)
        self.embed_positions = SinusoidalPositionalEncoding(config)
        self.dropout = config.dropout
        self.word_dropout = word_dropout

    def forward(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None = None,
        offset: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        """`inputs_embeds` replace the lookup `embed_tokens(input_ids)`, scaled and positioned the same."""
        token_embeddings = self._drop_words(self._lookup(input_ids, inputs_embeds, offset))
        positions = self.embed_positions(token_embeddings.shape[1], offset)
        embeddings = token_embeddings * self.embed_scale + positions
        return F.dropout(embeddings, p=self.dropout, training=self.training)

    def _lookup(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, offset: int | torch.Tensor
    ) -> torch.Tensor:
        """The embedding of each token, (B,L,D), after the inputs are checked."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if not is_torchdynamo_compiling() and isinstance(offset, int):  # a static cache's offset is a tensor
            self._check_ids(input_ids, offset)
            length = (input_ids if inputs_embeds is None else inputs_embeds).shape[1]
            check_length(self.config, offset + length)
        return self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds

    def _drop_words(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Word dropout: whole tokens vanish, their positions stay; not rescaled, a missing word is no
        signal."""
        if not (self.training and self.word_dropout):
            return embeddings
        kept = torch.rand(embeddings.shape[:2], device=embeddings.device) >= self.word_dropout
        return embeddings * kept.unsqueeze(-1).to(embeddings.dtype)

    def _check_ids(self, input_ids: torch.Tensor | None, offset: int):
        """Name a token id outside the vocabulary here rather than fail with an index error deep inside torch.

        Ids are checked on the first call (offset 0) only: a decoding step's ids come from the model itself,
        and their min/max would cost a device synchronisation every step. Nor in training on an accelerator,
        for the same reason every update: the training script checks its tokenizer against the model once,
        before.
        """
        checked = input_ids is not None and (input_ids.device.type == "cpu" or not self.training)
        if not (offset == 0 and checked and input_ids.numel()):
            return
        if input_ids.min() < 0 or input_ids.max() >= self.config.vocab_size:
            raise ValueError(
                f"token ids must be in [0, vocab_size={self.config.vocab_size}), got ids from "
                f"{input_ids.min().item()} to {input_ids.max().item()}: does the tokenizer match the model?"
            )


def check_length(config: VanillaTransformerConfig, length: int):
    """A sequence longer than the table of positions is named here, with its remedy."""
    if length > config.max_position_embeddings:
        raise ValueError(
            f"sequence of {length} tokens is longer than max_position_embeddings="
            f"{config.max_position_embeddings}; truncate the input or raise max_position_embeddings"
        )


def sinusoidal_positions(num_positions: int, d_model: int) -> torch.Tensor:
    """3.5 PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...): (num_positions, D)."""
    position = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1)
    inverse_frequency = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(num_positions, d_model)
    table[:, 0::2] = torch.sin(position * inverse_frequency)
    table[:, 1::2] = torch.cos(position * inverse_frequency)
    return table


class SinusoidalPositionalEncoding(nn.Module):
    """3.5 Fixed (not learned, not saved) encodings for positions offset..offset+L-1: -> (L, D)."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.register_buffer(
            "table", sinusoidal_positions(config.max_position_embeddings, config.d_model), persistent=False
        )

    def forward(self, length: int, offset: int | torch.Tensor = 0) -> torch.Tensor:
        # Indexed, not sliced: a static cache gives its length as a tensor, which must not become a Python
        # int.
        return self.table[torch.arange(length, device=self.table.device) + offset]


class ResidualConnection(nn.Module):
    """3.1 + 5.4 LayerNorm(x + Dropout(Sublayer(x))): (B,L,D) -> (B,L,D).

    With pre_layernorm (a departure): x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = config.dropout
        self.pre_layernorm = config.pre_layernorm

    def forward(
        self, hidden_states: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        if self.pre_layernorm:
            return hidden_states + F.dropout(
                sublayer(self.layer_norm(hidden_states)), self.dropout, self.training
            )
        return self.layer_norm(
            hidden_states + F.dropout(sublayer(hidden_states), self.dropout, self.training)
        )


class EncoderLayer(GradientCheckpointingLayer):
    """3.1 Encoder layer: self-attention then feed-forward, each in a residual connection: (B,S,D) -> same."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, layer_idx, is_causal=False, is_cross_attention=False)
        self.self_attn_residual = ResidualConnection(config)
        self.feed_forward = PositionwiseFeedForward(config)
        self.feed_forward_residual = ResidualConnection(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        hidden_states = self.self_attn_residual(
            hidden_states, lambda x: self.self_attn(x, attention_mask=attention_mask, **kwargs)[0]
        )
        return self.feed_forward_residual(hidden_states, self.feed_forward)


class DecoderLayer(GradientCheckpointingLayer):
    """3.1 Decoder layer: masked self-attention, attention over the encoder output (B,S,D), feed-forward.

    (B,T,D) -> (B,T,D)."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, layer_idx, is_causal=True, is_cross_attention=False)
        self.self_attn_residual = ResidualConnection(config)
        self.encoder_attn = MultiHeadAttention(config, layer_idx, is_causal=False, is_cross_attention=True)
        self.encoder_attn_residual = ResidualConnection(config)
        self.feed_forward = PositionwiseFeedForward(config)
        self.feed_forward_residual = ResidualConnection(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        hidden_states = self.self_attn_residual(
            hidden_states,
            lambda x: self.self_attn(x, attention_mask=attention_mask, cache=cache, **kwargs)[0],
        )
        hidden_states = self.encoder_attn_residual(
            hidden_states,
            lambda x: self.encoder_attn(
                x,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                cache=cache,
                **kwargs,
            )[0],
        )
        return self.feed_forward_residual(hidden_states, self.feed_forward)


class VanillaTransformerPreTrainedModel(PipelineCodeAndCardMixin, PreTrainedModel):
    """3 The base of the stacks and models: transformers' settings, the reference code's Xavier init."""

    config: VanillaTransformerConfig
    config_class = VanillaTransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["EncoderLayer", "DecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """Xavier/Glorot uniform for every weight matrix and the shared embedding, as the reference code."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.xavier_uniform_(module.weight)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositionalEncoding):
            init.copy_(module.table, sinusoidal_positions(*module.table.shape))


class LayerStack(VanillaTransformerPreTrainedModel):
    """3.1 N identical layers over token embeddings, a final LayerNorm only with pre_layernorm: -> (B,L,D)."""

    def __init__(
        self,
        config: VanillaTransformerConfig,
        layer_class: type[nn.Module],
        num_layers: int,
        word_dropout: float,
    ):
        super().__init__(config)
        self.embeddings = TokenEmbedding(config, word_dropout)
        self.layers = nn.ModuleList([layer_class(config, i) for i in range(num_layers)])
        self.layer_dropout = config.layer_dropout
        self.final_layer_norm = (
            nn.LayerNorm(config.d_model, config.layer_norm_eps) if config.pre_layernorm else None
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.embed_tokens = value

    def active_layers(self) -> list[nn.Module]:
        """The layers this forward runs: in training each skipped with `layer_dropout` (LayerDrop, Fan et al.,
        2019), a departure from the paper."""
        if not (self.training and self.layer_dropout):
            return list(self.layers)
        kept = torch.rand(len(self.layers)) >= self.layer_dropout  # on the CPU: no device synchronisation
        return [layer for layer, keep in zip(self.layers, kept.tolist(), strict=True) if keep]

    def final_norm(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The stack's last LayerNorm with pre_layernorm (its layers leave their sums unnormalised); post-LN,
        the paper's, needs none."""
        return hidden_states if self.final_layer_norm is None else self.final_layer_norm(hidden_states)


class VanillaTransformerEncoder(LayerStack):
    """3.1 Encoder: embeddings then N encoder layers: ids (B,S) -> (B,S,D)."""

    _can_record_outputs = {"hidden_states": EncoderLayer, "attentions": MultiHeadAttention}

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config, EncoderLayer, config.encoder_layers, config.source_word_dropout)

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        hidden_states = self.embeddings(input_ids, inputs_embeds)
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for layer in self.active_layers():
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=self.final_norm(hidden_states))


class VanillaTransformerDecoder(LayerStack):
    """3.1 Decoder: embeddings then N decoder layers over the encoder output: (B,T), (B,S,D) -> (B,T,D)."""

    _can_record_outputs = {
        "hidden_states": DecoderLayer,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config, DecoderLayer, config.decoder_layers, config.target_word_dropout)

    @capture_outputs
    @takes_cache_by_either_name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        cache = self._cache(cache, use_cache)
        past_length = cache.get_seq_length() if cache is not None else 0
        hidden_states = self.embeddings(input_ids, inputs_embeds, offset=past_length)
        causal_mask, encoder_attention_mask = self._masks(
            hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask, cache
        )
        for layer in self.active_layers():
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=self.final_norm(hidden_states), **{CACHE_NAME: cache}
        )

    def _cache(self, cache: Cache | None, use_cache: bool | None) -> EncoderDecoderCache | None:
        """The keys and values of earlier decoding steps: a new cache where asked for, a plain one wrapped."""
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            return EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        if cache is not None and not isinstance(cache, EncoderDecoderCache):
            # A plain cache holds the self-attention keys and values; cross-attention ones are computed anew.
            return EncoderDecoderCache(cache, DynamicCache(config=self.config))
        return cache

    def _masks(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None,
        cache: EncoderDecoderCache | None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """3.2.3 The (B,1,T,S) masks from the (B,L) padding masks: causal and padding for the self-attention,
        the source's padding for the attention over the encoder output, in the kernel's form."""
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            **{CACHE_NAME: cache.self_attention_cache if cache is not None else None},
        )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        return causal_mask, encoder_attention_mask


def cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None
) -> torch.Tensor:
    """Cross-entropy of logits (B,T,V) against labels (B,T), -100 ignored: the mean over the labelled tokens,
    or their sum divided by `num_items_in_batch` (transformers' Trainer over accumulated batches)."""
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction=reduction)
    return loss if num_items_in_batch is None else loss / num_items_in_batch


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """3.1 Output embeddings offset by one position: decoder input t is label t-1, the first decoder_start.

    -100 (an ignored label) becomes pad: (B,T) -> (B,T).
    """
    decoder_input_ids = labels.new_full(labels.shape, decoder_start_token_id)
    decoder_input_ids[:, 1:] = labels[:, :-1]
    return decoder_input_ids.masked_fill_(decoder_input_ids == -100, pad_token_id)


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """3 The encoder-decoder with one token embedding shared by both stacks: -> decoder states (B,T,D)."""

    _tied_weights_keys = {
        "encoder.embeddings.embed_tokens.weight": "shared.weight",
        "decoder.embeddings.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        # 3.4 "we share the same weight matrix between the two embedding layers and the pre-softmax linear
        # transformation": this one. The encoder's and decoder's `embed_tokens` and the `lm_head` of
        # VanillaTransformerForConditionalGeneration are tied to it by `_tied_weights_keys`, which
        # transformers applies after init and loading, and keeps through save_pretrained and
        # resize_token_embeddings.
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.encoder = VanillaTransformerEncoder(config)
        self.decoder = VanillaTransformerDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding):
        self.shared = value
        self.encoder.set_input_embeddings(value)
        self.decoder.set_input_embeddings(value)

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """3.4 Both stacks read `shared`, whatever tie_word_embeddings (which unties the output projection
        only)."""
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return dict(self._tied_weights_keys)

    @can_return_tuple
    @takes_cache_by_either_name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        r"""
        inputs_embeds, decoder_inputs_embeds (`torch.Tensor` of shape `(batch_size, length, d_model)`): in
            place of `input_ids` / `decoder_input_ids`, what `get_input_embeddings()` gives for them (the
            model scales them by sqrt(d_model) and adds positions, as it does for ids).
        """
        encoder_outputs = self._encode(input_ids, attention_mask, inputs_embeds, encoder_outputs, kwargs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError("pass decoder_input_ids or labels (decoder inputs are labels shifted right)")
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            attention_mask=decoder_attention_mask,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            **{CACHE_NAME: getattr(decoder_outputs, CACHE_NAME)},
        )

    def _encode(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        encoder_outputs: BaseModelOutput | tuple | None,
        kwargs: dict,
    ) -> BaseModelOutput:
        """The encoder's output z, computed here unless given (generate computes it once, before decoding)."""
        if encoder_outputs is not None:
            if isinstance(encoder_outputs, BaseModelOutput):
                return encoder_outputs
            return BaseModelOutput(*encoder_outputs)
        if input_ids is None and inputs_embeds is None:
            raise ValueError("pass input_ids (the source tokens), inputs_embeds or encoder_outputs")
        return self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
        )


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
    """3.4 The model plus the pre-softmax projection, the shared embedding unless untied: -> (B,T,V)."""

    # 3.4: the pre-softmax projection is the one shared matrix (with tie_word_embeddings, the default)
    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
    accepts_loss_kwargs = True

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    @takes_cache_by_either_name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""
        inputs_embeds, decoder_inputs_embeds (`torch.Tensor` of shape `(batch_size, length, d_model)`): see
            `VanillaTransformerModel.forward`.
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`): target ids, -100 where ignored.
            When given, decoder inputs default to the labels shifted right and the loss is cross-entropy
            averaged over the labelled tokens, or summed and divided by `num_items_in_batch`. The paper's
            label smoothing (section 5.4) is a training setting: `hf_vanilla.training.train` applies it to
            the logits.
        logits_to_keep (`int` or `torch.Tensor`): project only the last `logits_to_keep` positions (0: all),
            or these target positions, to the vocabulary; `generate` asks for the last one.
        """
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        kept = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(outputs.last_hidden_state[:, kept])
        return Seq2SeqLMOutput(
            loss=None if labels is None else cross_entropy(logits, labels, num_items_in_batch),
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            **{CACHE_NAME: getattr(outputs, CACHE_NAME)},
        )

    def generate(self, *args, generation_config: GenerationConfig | None = None, **kwargs):
        """transformers' `generate`; asked for no output limit anywhere, it runs to the decoder's positions
        rather than to transformers' default of 20 new tokens, which would cut most translations. (A limit
        saved in the generation config instead would make generate warn at every call that sets
        max_new_tokens.)"""
        settings = generation_config if generation_config is not None else self.generation_config
        limits = ("max_length", "max_new_tokens")  # generate's two ways to bound a translation
        if all(kwargs.get(name) is None and getattr(settings, name, None) is None for name in limits):
            kwargs["max_length"] = self.config.max_position_embeddings
        return super().generate(*args, generation_config=generation_config, **kwargs)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        if self.config.pad_token_id is None:
            raise ValueError("config.pad_token_id is None: decoder inputs made from labels need a padding id")
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)


# Below the paper: 3.2.1's formula is also the matmul kernel on "sdpa" masks that CPUs may prefer
# (attention_kernels.py).
register_cpu_attention(scaled_dot_product_attention)

__all__ = [
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
]
