"""The small-corpus sweep's subsets: the same seeded pairs for every run, the whole validation and test splits."""

import json

import pytest

from hf_vanilla.tools.small_corpus import seeded_subset


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "multi30k"
    folder.mkdir()
    for split, size in (("train", 50), ("validation", 7), ("test", 5)):
        rows = [{"translation": {"de": f"{split} {index}", "en": f"{split} {index}"}} for index in range(size)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_a_subset_is_the_same_seeded_pairs_every_time_beside_the_whole_evaluation_splits(corpus, tmp_path):
    first = seeded_subset(corpus, 20, seed=1, folder=tmp_path / "first")
    again = seeded_subset(corpus, 20, seed=1, folder=tmp_path / "again")
    other = seeded_subset(corpus, 20, seed=2, folder=tmp_path / "other")
    chosen = (first / "train.jsonl").read_text()
    assert len(chosen.splitlines()) == 20 and chosen == (again / "train.jsonl").read_text()
    assert chosen != (other / "train.jsonl").read_text()
    for split in ("validation", "test"):
        assert (first / f"{split}.jsonl").read_text() == (corpus / f"{split}.jsonl").read_text()


def test_a_subset_larger_than_the_corpus_is_refused_in_one_line(corpus, tmp_path):
    with pytest.raises(ValueError, match="holds 50 training pairs, fewer than 100"):
        seeded_subset(corpus, 100, seed=1, folder=tmp_path / "subset")
