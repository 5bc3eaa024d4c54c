"""The small-corpus sweep's subsets: the same seeded pairs for every run, the whole validation and test
splits."""

import json

import pytest
import torch

from hf_vanilla.tools.small_corpus import Sweep, run_sweep, seeded_subset


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "multi30k"
    folder.mkdir()
    for split, size in (("train", 50), ("validation", 7), ("test", 5)):
        rows = [
            {"translation": {"de": f"{split} {index}", "en": f"{split} {index}"}} for index in range(size)
        ]
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


def test_the_marian_baseline_alone_is_refused_in_one_line_before_anything_trains(corpus, tmp_path):
    threads = torch.get_num_threads()  # the sweep runs on one thread; the tests after this one keep theirs
    sweep = Sweep(
        corpus, tmp_path / "work", minutes=0.1, sizes=(20,), language_pairs=("de-en",), recipes=("marian",)
    )
    try:
        with pytest.raises(
            ValueError,
            match=r"run the size table recipe first \(--recipes 'size table' "
            r"marian\)",
        ):
            run_sweep(sweep, tmp_path / "report.json")
    finally:
        torch.set_num_threads(threads)
    assert not (tmp_path / "work" / "de-en-20-marian").exists()
