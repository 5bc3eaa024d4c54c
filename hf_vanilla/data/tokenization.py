"""Joint source/target byte-level BPE (the paper's shared vocabulary, section 5.1): train and check it.
`hf_vanilla.checkpoints.tokenizer_directory` saves it."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import datasets
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerFast

from hf_vanilla.model.decoding import check_tokenizer_fingerprint, tokenizer_fingerprint

logger = logging.getLogger(__name__)

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
# Trainers give special tokens the first ids in this order: <pad>=0, <s>=1, </s>=2, <unk>=3.
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
DEFAULT_VOCAB_SIZE = 8000
DEFAULT_MODEL_MAX_LENGTH = 1024
LEARNED_FROM_FILE = "learned_from.json"


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    min_frequency: int = 2,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    show_progress: bool = True,
    length: int | None = None,
) -> PreTrainedTokenizerFast:
    """Train one byte-level BPE on `texts` (both languages mixed) and wrap it as a transformers tokenizer.

    `show_progress`: a bar of the texts read (of `length`, when given; tokenizers' own bars show only on a
    terminal), then a line when the merges are being learned.

    Byte-level pre-tokenization without a prefix space makes `decode(encode(text)) == text` for any
    text: every byte has a token, so nothing becomes `<unk>` and no space is added or lost. Every
    encoded sequence ends with `</s>`; `<s>` is the decoder start token the model prepends itself.

    Why the default size and the Multi30k recipes' 5,000, measured: docs/your-data.md, "The tokenizer's size".
    """
    bpe = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    if show_progress:
        texts = _reported(texts, length)
    bpe.train_from_iterator(texts, trainer=trainer, length=length)
    bpe.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}",
        pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}",
        special_tokens=[(EOS_TOKEN, bpe.token_to_id(EOS_TOKEN))],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
        # The default clean-up would glue " ." to "." and break the exact round trip.
        clean_up_tokenization_spaces=False,
    )


def _reported(texts: Iterable[str], length: int | None) -> Iterator[str]:
    """`texts` with a progress bar of those read, then a log line: the BPE counts words as it reads, then
    merges."""
    yield from tqdm(texts, total=length, desc="BPE: counting words", unit=" texts", mininterval=10)
    logger.info("BPE: words counted; learning the merges (no progress shown)")


def check_tokenizer_languages(directory: str | os.PathLike, source_lang: str, target_lang: str) -> None:
    """Raise a ValueError of one line when the tokenizer in `directory` learned from another language pair
    than `source_lang` and `target_lang` (either direction: the vocabulary is joint); a tokenizer that records
    none (saved before it was recorded, or by other tools) is taken with a warning."""
    record = Path(directory) / LEARNED_FROM_FILE
    if not record.is_file():
        logger.warning(
            "tokenizer %s records no languages (%s is missing): make sure it learned %s and %s",
            directory,
            LEARNED_FROM_FILE,
            source_lang,
            target_lang,
        )
        return
    learned = json.loads(record.read_text())["languages"]
    if sorted(learned) != sorted((source_lang, target_lang)):
        raise ValueError(
            f"tokenizer {directory} learned {'+'.join(learned)}, but this run translates {source_lang}->"
            f"{target_lang}: give a tokenizer folder of its own (e.g. --tokenizer {Path(directory).parent}/"
            f"bpe-{'-'.join(sorted((source_lang, target_lang)))}, trained on first use)"
        )


# Pairs read from Arrow at a time while the BPE counts words: the texts never sit in memory as one Python
# list.
TEXT_BATCH = 10_000


def sample_pairs(pairs: datasets.Dataset, max_sentences: int | None, seed: int = 0) -> datasets.Dataset:
    """`pairs`, or a random `max_sentences` of them (the same ones for the same seed) when there are more.

    Random, not the first ones: WMT's training split is its corpora one after another (Europarl first)."""
    if max_sentences is None or max_sentences >= len(pairs):
        return pairs
    return pairs.shuffle(seed=seed).select(range(max_sentences)).flatten_indices()


def pair_texts(pairs: datasets.Dataset) -> Iterator[str]:
    """Every source and target text of `pairs`, read a batch at a time."""
    for batch in pairs.iter(batch_size=TEXT_BATCH):
        yield from batch["source"]
        yield from batch["target"]


def round_trip_rate(tokenizer: PreTrainedTokenizerFast, texts: Sequence[str]) -> float:
    """Fraction of `texts` for which decoding the encoding (special tokens skipped) gives the text back."""
    decoded = tokenizer.batch_decode(tokenizer(list(texts))["input_ids"], skip_special_tokens=True)
    return sum(d == t for d, t in zip(decoded, texts, strict=True)) / len(texts)


def mean_tokens_per_sentence(tokenizer: PreTrainedTokenizerFast, texts: Sequence[str]) -> float:
    """Mean number of subword tokens a sentence, `</s>` not counted."""
    encodings = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return sum(map(len, encodings)) / len(encodings)


def config_kwargs_from_tokenizer(tokenizer: PreTrainedTokenizerFast) -> dict[str, int | str]:
    """The model config fields that must agree with the tokenizer: sizes, special token ids, fingerprint."""
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.bos_token_id,
        "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
    }


def check_tokenizer_matches_model(tokenizer: PreTrainedTokenizerFast, config) -> None:
    """Raise ValueError naming every size or token id where `config` disagrees with `tokenizer`, or else
    its vocabulary when `config` records another fingerprint (`check_tokenizer_fingerprint`)."""
    mismatches = [
        f"{field}: tokenizer has {expected}, model config has {getattr(config, field, None)}"
        for field, expected in config_kwargs_from_tokenizer(tokenizer).items()
        if field != "tokenizer_fingerprint" and getattr(config, field, None) != expected
    ]
    if mismatches:
        raise ValueError("Tokenizer and model config disagree; " + "; ".join(mismatches))
    check_tokenizer_fingerprint(tokenizer, config)
