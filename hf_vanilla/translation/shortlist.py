"""A vocabulary shortlist (a departure from the paper, off unless asked for): the target tokens a translation
may use, chosen by its source tokens, so that the decoder's output layer scores a few hundred tokens, not the
whole vocabulary (WNMT 2018's CTranslate2 vocabulary map; Marian's lexical shortlists).

Built from the training pairs: each source token's `top_k` target tokens by how many pairs hold both (ranked
among the tokens not already frequent), and the `frequent` target tokens of most pairs, allowed everywhere.
Saved beside the weights in CTranslate2's `vocab_mapping` format (`VOCAB_MAP_FILE`): a line a source token,
the token, a tab, its target tokens separated by spaces; the frequent ones on the line whose key is empty.
Tokens are named as the tokenizer names them (byte-level BPE: no token holds a space or a tab). CTranslate2
allows a batch the union of its sentences' lists, the frequent tokens and its own specials (`<unk>`, `<s>`,
`</s>`).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from hf_vanilla.files import write_text_atomic

VOCAB_MAP_FILE = "vocab_map.txt"
# CTranslate2 adds these to every batch's candidates itself (its VocabularyMap), whatever the map says.
ALWAYS_ALLOWED = frozenset({"<unk>", "<s>", "</s>"})


@dataclass(frozen=True)
class ShortlistSize:
    """How many target tokens each source token allows (`top_k`) and how many are allowed everywhere
    (`frequent`). The defaults: Marian's 100 frequent, fewer a source token for a 5,000-token vocabulary."""

    top_k: int = 20
    frequent: int = 100

    def __post_init__(self):
        if self.top_k < 0 or self.frequent < 0:
            raise ValueError(f"a shortlist's sizes are counts, not {self.top_k} and {self.frequent}")


@dataclass(frozen=True)
class Shortlist:
    """The target tokens allowed everywhere (`frequent`) and those each source token allows (`by_source`)."""

    frequent: tuple[str, ...]
    by_source: dict[str, tuple[str, ...]]

    def allowed(self, source_tokens: Iterable[str]) -> set[str]:
        """What a sentence (or a batch) of `source_tokens` may be translated into."""
        allowed = set(self.frequent) | ALWAYS_ALLOWED
        for token in source_tokens:
            allowed.update(self.by_source.get(token, ()))
        return allowed


def build_shortlist(
    sources: Sequence[Sequence[str]], targets: Sequence[Sequence[str]], size: ShortlistSize = ShortlistSize()
) -> Shortlist:
    """The shortlist of tokenized pairs, from counts of pairs holding a source and a target token together;
    ties go to the target token of more pairs, then to the one named first in sorted order, so that a build is
    reproducible."""
    pairs_with = Counter()  # target token -> pairs holding it
    together: dict[str, Counter] = defaultdict(Counter)  # source token -> target token -> pairs holding both
    for source, target in zip(sources, targets, strict=True):
        target_types = set(target)
        pairs_with.update(target_types)
        for token in set(source):
            together[token].update(target_types)
    frequent = tuple(sorted(pairs_with, key=lambda token: (-pairs_with[token], token))[: size.frequent])
    common = set(frequent)

    def strongest(counts: Counter) -> tuple[str, ...]:
        ranked = sorted(counts, key=lambda token: (-counts[token], -pairs_with[token], token))
        return tuple([token for token in ranked if token not in common][: size.top_k])

    return Shortlist(frequent, {token: strongest(counts) for token, counts in sorted(together.items())})


def tokenized_pairs(
    tokenizer: PreTrainedTokenizerBase, sources: Sequence[str], targets: Sequence[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """The token names of each source and target, as the model reads and writes them (`</s>` included)."""

    def names(texts: Sequence[str]) -> list[list[str]]:
        encoded = tokenizer(list(texts), verbose=False)["input_ids"]
        return [tokenizer.convert_ids_to_tokens(ids) for ids in encoded]

    return names(sources), names(targets)


def save_shortlist(shortlist: Shortlist, path: str | os.PathLike) -> Path:
    """Write `shortlist` to `path` (atomically) in CTranslate2's `vocab_mapping` format."""
    lines = [("", shortlist.frequent), *shortlist.by_source.items()]
    for key, tokens in lines:
        named = [key, *tokens] if key else list(tokens)
        if any(not token or any(space in token for space in " \t\n") for token in named):
            raise ValueError(f"a vocabulary map's tokens are words without spaces; {named} holds another")
    write_text_atomic(path, "".join(f"{key}\t{' '.join(tokens)}\n" for key, tokens in lines))
    return Path(path)


def load_shortlist(path: str | os.PathLike) -> Shortlist:
    """The shortlist `save_shortlist` wrote to `path`."""
    frequent: tuple[str, ...] = ()
    by_source = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        key, _, tokens = line.partition("\t")
        if key:
            by_source[key] = tuple(tokens.split())
        else:
            frequent = tuple(tokens.split())
    return Shortlist(frequent, by_source)
