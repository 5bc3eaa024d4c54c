"""A small German-English parallel corpus made from word tables, so the tests need no downloaded data.

Every sentence is "subject verb adjective object [place][ und lächelt]." with aligned translations, e.g.
"Eine Ärztin trägt einen grünen Hut am Strand." / "A doctor carries a green hat on the beach."
Umlauts, ß, accents and commas are in the tables so round trips and byte-level BPE have something to do.
"""

import json
import random
from pathlib import Path

# (German nominative with article, English)
SUBJECTS = [
    ("Ein Mann", "A man"),
    ("Eine Frau", "A woman"),
    ("Ein Junge", "A boy"),
    ("Ein Mädchen", "A girl"),
    ("Ein Hund", "A dog"),
    ("Eine Katze", "A cat"),
    ("Eine Ärztin", "A doctor"),
    ("Ein Koch", "A cook"),
    ("Eine Großmutter", "A grandmother"),
    ("Ein Fußballspieler", "A football player"),
]
VERBS = [
    ("trägt", "carries"),
    ("hält", "holds"),
    ("kauft", "buys"),
    ("sucht", "looks for"),
    ("malt", "paints"),
    ("wäscht", "washes"),
    ("betrachtet", "looks at"),
    ("wirft", "throws"),
    ("verkauft", "sells"),
]
# German stem (takes the gender's ending), English
ADJECTIVES = [
    ("rot", "red"),
    ("blau", "blue"),
    ("grün", "green"),
    ("groß", "big"),
    ("klein", "small"),
    ("alt", "old"),
    ("schön", "beautiful"),
    ("weiß", "white"),
    ("schwarz", "black"),
    ("gelb", "yellow"),
]
# (gender, German noun, English noun)
OBJECTS = [
    ("m", "Ball", "ball"),
    ("m", "Hut", "hat"),
    ("m", "Schlüssel", "key"),
    ("m", "Kürbis", "pumpkin"),
    ("f", "Tasche", "bag"),
    ("f", "Gitarre", "guitar"),
    ("f", "Blume", "flower"),
    ("f", "Tür", "door"),
    ("n", "Fahrrad", "bike"),
    ("n", "Buch", "book"),
    ("n", "Boot", "boat"),
    ("n", "Brötchen", "bread roll"),
]
# Accusative indefinite article and adjective ending after it, by gender.
ARTICLE_AND_ENDING = {"m": ("einen", "en"), "f": ("eine", "e"), "n": ("ein", "es")}
PLACES = [
    ("", ""),
    (" im Park", " in the park"),
    (" auf der Straße", " on the street"),
    (" am Strand", " on the beach"),
    (" vor dem Café", " in front of the café"),
    (" neben dem Fluss", " next to the river"),
    (" in der Küche", " in the kitchen"),
]
ENDINGS = [("", ""), (" und lächelt", " and smiles"), (", während es regnet", " while it rains")]

SPLIT_SIZES = {"train": 800, "validation": 50, "test": 50}


def sentence_pair(subject, verb, adjective, obj, place, ending) -> tuple[str, str]:
    gender, german_noun, english_noun = obj
    article, adjective_ending = ARTICLE_AND_ENDING[gender]
    english_article = "an" if adjective[1][0] in "aeiou" else "a"
    german = (
        f"{subject[0]} {verb[0]} {article} {adjective[0]}{adjective_ending} "
        f"{german_noun}{place[0]}{ending[0]}."
    )
    english = f"{subject[1]} {verb[1]} {english_article} {adjective[1]} {english_noun}{place[1]}{ending[1]}."
    return german, english


def synthetic_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """`count` distinct (German, English) pairs, the same ones for the same seed."""
    rng = random.Random(seed)
    tables = (SUBJECTS, VERBS, ADJECTIVES, OBJECTS, PLACES, ENDINGS)
    pairs = {}  # a dict keeps the drawing order, so the splits are the same on every run
    while len(pairs) < count:
        pair = sentence_pair(*(rng.choice(table) for table in tables))
        pairs[pair] = None
    return list(pairs)


def write_synthetic_corpus(directory: Path) -> Path:
    """train/validation/test.jsonl in the Hub `translation` layout, no sentence in two splits."""
    pairs = synthetic_pairs(sum(SPLIT_SIZES.values()))
    start = 0
    for split, size in SPLIT_SIZES.items():
        rows = [{"translation": {"de": de, "en": en}} for de, en in pairs[start : start + size]]
        (directory / f"{split}.jsonl").write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        )
        start += size
    return directory
