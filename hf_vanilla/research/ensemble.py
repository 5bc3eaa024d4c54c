"""Ensemble decoding: several trained models translate as one, through `generate` itself.

Each step, the models' next-token probabilities are averaged (as fairseq and Marian average an ensemble's),
and `generate`'s search (greedy, beam, sampling) runs on the mixture. The first model is the one `generate` is
called on; the others ride along in a logits processor, each with its own key/value cache. The processor never
sees beam search's reordering, so it recovers it: every running hypothesis extends exactly one hypothesis of
the step before, found by its prefix among its own sentence's rows. A departure from the paper, which reports
single models: used only where asked for (`--ensemble`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, PreTrainedModel, PreTrainedTokenizerBase
from transformers.modeling_outputs import BaseModelOutput

from hf_vanilla.checkpoints.loading import load_models
from hf_vanilla.data.tokenization import check_tokenizer_matches_model
from hf_vanilla.model.decoding import writes_right_to_left
from hf_vanilla.model.modeling_vanilla import CACHE_NAME
from hf_vanilla.translation.decoding import BatchLogitsProcessors


def load_ensemble(
    model_names_or_paths: Sequence[str | os.PathLike], device: str | None = None, dtype: str = "float32"
) -> list[PreTrainedModel]:
    """The models of an ensemble beside the first, loaded as the first is; a member that does not load is a
    ValueError or FileNotFoundError that names it."""
    return [model for model, _ in load_models(model_names_or_paths, device, dtype)]


def ensemble_logits_processors(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, members: Sequence[PreTrainedModel]
) -> BatchLogitsProcessors:
    """`translate_sentences`' `logits_processors` that make `members` translate with `model` as one: checked
    (`check_ensemble`) before anything is decoded."""
    check_ensemble(model, tokenizer, members)
    for member in members:
        member.eval()
    return lambda encoded: [EnsembleLogitsProcessor(members, **encoded)]


def check_ensemble(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, members: Sequence[PreTrainedModel]
) -> None:
    """Raise a ValueError naming the member that cannot join `model`: another vocabulary, or another
    device."""
    for index, member in enumerate(members, 1):
        if member.config.vocab_size != model.config.vocab_size:
            raise ValueError(
                f"ensemble member {index} has a vocabulary of {member.config.vocab_size} tokens, the first "
                f"model {model.config.vocab_size}: an ensemble's models must share one tokenizer"
            )
        try:
            check_tokenizer_matches_model(tokenizer, member.config)
        except ValueError as err:
            raise ValueError(
                f"ensemble member {index} does not share the first model's tokenizer: {err}"
            ) from err
        if writes_right_to_left(member.config) != writes_right_to_left(model.config):
            raise ValueError(
                f"ensemble member {index} writes {_word_order(member)}, the first model "
                f"{_word_order(model)}: an ensemble's models must write in one order (a right-to-left model "
                "reranks: --rerank-right-to-left)"
            )
        if member.device != model.device:
            raise ValueError(
                f"ensemble member {index} is on {member.device}, the first model on {model.device}"
            )


def _word_order(model: PreTrainedModel) -> str:
    return "right to left" if writes_right_to_left(model.config) else "left to right"


class EnsembleLogitsProcessor(LogitsProcessor):
    """Mix `members`' next-token log-probabilities into the scores of the model `generate` runs, for one
    batch.

    Takes `input_ids` (batch, source length) and `attention_mask` (same shape), the batch `generate` is given;
    at each step, `decoder_ids` (rows, length) with `rows` a multiple of batch (beams, returned sequences) and
    `scores` (rows, vocab); returns (rows, vocab): log of the mean of the models' probabilities, -inf wherever
    `scores` was (a token an earlier processor ruled out stays out)."""

    def __init__(
        self, members: Sequence[PreTrainedModel], input_ids: torch.Tensor, attention_mask: torch.Tensor
    ):
        self.members = list(members)
        self.batch_size = input_ids.shape[0]
        self.attention_mask = attention_mask
        self.encoder_states = [
            member.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            for member in self.members
        ]
        self.caches = [None] * len(self.members)
        self.previous_ids: torch.Tensor | None = None

    def _expand_to_rows(self, rows: int) -> None:
        """Give the source side one row per hypothesis, once: generate keeps `rows` fixed for the whole
        search."""
        if self.attention_mask.shape[0] != rows:
            per_sentence = rows // self.batch_size
            self.attention_mask = self.attention_mask.repeat_interleave(per_sentence, 0)
            self.encoder_states = [
                states.repeat_interleave(per_sentence, 0) for states in self.encoder_states
            ]

    def _parents(self, decoder_ids: torch.Tensor) -> torch.Tensor | None:
        """For each row, the row of the step before whose hypothesis it extends; None if any row has none."""
        previous = self.previous_ids
        if previous is None or previous.shape != (decoder_ids.shape[0], decoder_ids.shape[1] - 1):
            return None
        batch = self.batch_size
        per_sentence = decoder_ids.shape[0] // batch  # rows of one sentence are consecutive
        prefixes = decoder_ids[:, :-1].view(batch, per_sentence, 1, -1)
        candidates = previous.view(batch, 1, per_sentence, -1)
        matches = (prefixes == candidates).all(-1)  # (batch, row, parent row) of the same sentence
        if not bool(matches.any(-1).all()):
            return None
        first_sentence_row = torch.arange(batch, device=decoder_ids.device).unsqueeze(1) * per_sentence
        return (matches.int().argmax(-1) + first_sentence_row).flatten()

    def _member_log_probs(self, index: int, decoder_ids: torch.Tensor, parents: torch.Tensor | None):
        cache = self.caches[index]
        if parents is None:  # the first step, or a step whose parents are unknown: decode the whole prefix
            cache, new_ids = None, decoder_ids
        else:
            cache.reorder_cache(parents)
            new_ids = decoder_ids[:, -1:]
        outputs = self.members[index](
            encoder_outputs=BaseModelOutput(last_hidden_state=self.encoder_states[index]),
            attention_mask=self.attention_mask,
            decoder_input_ids=new_ids,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.caches[index] = getattr(outputs, CACHE_NAME)
        return torch.log_softmax(outputs.logits[:, -1].float(), dim=-1)

    def __call__(self, decoder_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._expand_to_rows(decoder_ids.shape[0])
        parents = self._parents(decoder_ids)
        log_probs = [torch.log_softmax(scores.float(), dim=-1)]
        log_probs += [
            self._member_log_probs(index, decoder_ids, parents) for index in range(len(self.members))
        ]
        self.previous_ids = decoder_ids.clone()
        mixture = torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(len(log_probs))
        return mixture.masked_fill(log_probs[0] == -math.inf, -math.inf).to(scores.dtype)
