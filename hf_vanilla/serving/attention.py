"""POST /attention's work on the worker: one sentence translated as POST / translates it, and the
cross-attention behind that translation as JSON (`hf_vanilla.translation.attention`), for the page's heatmap and for any
other client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hf_vanilla.model.decoding import cut_source
from hf_vanilla.serving.batching import RequestRefused
from hf_vanilla.translation.attention import SentenceAttentions
from hf_vanilla.translation.decoding import DecodingOptions
from hf_vanilla.translation.engines import ATTENTION, TranslationEngine, missing_ability

DECIMALS = 4  # of each weight in the JSON: a heatmap shows no finer difference, and the answer stays small


@dataclass(frozen=True)
class AttentionQuery:
    """One sentence, the options it decodes with, whether every head's weights are wanted (else their mean a
    layer), and the most source tokens the server draws attention for."""

    text: str
    options: DecodingOptions
    heads: bool
    max_tokens: int

    def __call__(self, engine: TranslationEngine) -> dict[str, Any]:
        """The answer, computed on the worker (`Batcher.submit_job`); RequestRefused for an engine that gives
        no attention (501) or a source over `max_tokens` (422)."""
        if ATTENTION not in engine.abilities:
            why = "this server's engine gives no attention weights: they need the attention behind a translation"
            raise RequestRefused(501, missing_ability(engine.describe()["engine"], ATTENTION, why))
        [source_ids] = engine.encode([self.text])  # its one tokenization
        if len(source_ids) > self.max_tokens:
            raise RequestRefused(
                422,
                f"inputs is {len(source_ids)} tokens, over the {self.max_tokens} this server shows attention for "
                "(--request-max-attention-tokens): send a shorter sentence",
            )
        source_ids = cut_source(source_ids, engine.max_source_tokens)
        return attention_json(engine.attention(source_ids, self.options), self.heads)


def attention_json(attentions: SentenceAttentions, heads: bool) -> dict[str, Any]:
    """The translation, its tokens and the cross-attention behind it: rows the output tokens, columns the
    source tokens, each row summing to 1; per layer the mean of its `num_heads` heads, and with `heads` each
    head's own."""
    cross = torch.stack(attentions.weights["cross"]).double()  # (layers, heads, output, source)
    answer = {
        "translation_text": attentions.target_text,
        "source_tokens": attentions.source_tokens,
        "output_tokens": attentions.predicted_tokens,
        "num_heads": cross.shape[1],
        "cross_attention": cross.mean(dim=1).round(decimals=DECIMALS).tolist(),
    }
    if heads:
        answer["cross_attention_heads"] = cross.round(decimals=DECIMALS).tolist()
    return answer
