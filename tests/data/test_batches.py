import dataclasses
import json
import logging

import datasets
import numpy as np
import pytest
import torch
from synthetic_corpus import SPLIT_SIZES

from hf_vanilla.data.batches import (
    CleaningRules,
    ShapeBucketBatchSampler,
    TokenBatchSampler,
    TokenizedRows,
    clean_and_tokenize,
    example_lengths,
    make_collator,
    padding_efficiency,
    reverse_words,
)
from hf_vanilla.data.corpus import CorpusError, load_translation_split
from hf_vanilla.data.tokenization import train_tokenizer


@pytest.fixture(scope="module")
def validation(corpus_path):
    return load_translation_split(corpus_path, "de", "en", "validation")


@pytest.fixture(scope="module")
def tokenizer(validation):
    return train_tokenizer(
        list(validation["source"]) + list(validation["target"]), vocab_size=600, show_progress=False
    )


@pytest.fixture(scope="module")
def tokenized_validation(validation, tokenizer):
    kept = clean_and_tokenize(validation, tokenizer, CleaningRules())[0]
    return kept.select_columns(["input_ids", "labels"])


@pytest.fixture
def random_lengths():
    """Source and target lengths like short captions, with a few long outliers."""
    rng = np.random.default_rng(0)
    return np.concatenate([rng.integers(3, 40, size=(997, 2)), [[300, 20], [12, 250], [120, 130]]])


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


# Loading


def test_translation_layout_gives_source_and_target(validation, corpus_path):
    with open(f"{corpus_path}/validation.jsonl") as raw:
        first = json.loads(raw.readline())["translation"]
    assert validation.column_names == ["source", "target"]
    assert len(validation) == SPLIT_SIZES["validation"]
    assert validation[0] == {"source": first["de"], "target": first["en"]}


def test_real_multi30k_loads_one_language_pair_of_four(multi30k_path):
    """The real copy holds cs, de, en and fr in each row: the real-data check that the pair is picked out."""
    with open(f"{multi30k_path}/validation.jsonl") as raw:
        first = json.loads(raw.readline())["translation"]
    validation = load_translation_split(multi30k_path, "fr", "cs", "validation")
    assert len(validation) == 1014
    assert validation[0] == {"source": first["fr"], "target": first["cs"]}
    with pytest.raises(ValueError, match=r"'xx'.*available languages: \['cs', 'de', 'en', 'fr'\]"):
        load_translation_split(multi30k_path, "xx", "en", "validation")


def test_flat_layout_gives_source_and_target(tmp_path):
    write_jsonl(
        tmp_path / "train.jsonl",
        [{"id": 7, "en": "A cat.", "de": "Eine Katze."}, {"id": 8, "en": "Hi", "de": "Hallo"}],
    )
    pairs = load_translation_split(str(tmp_path), "en", "de", "train")
    assert pairs.column_names == ["source", "target"]
    assert pairs.to_list() == [
        {"source": "A cat.", "target": "Eine Katze."},
        {"source": "Hi", "target": "Hallo"},
    ]


def test_unknown_language_lists_available_languages(corpus_path, tmp_path):
    with pytest.raises(ValueError, match=r"'xx'.*available languages: \['de', 'en'\]"):
        load_translation_split(corpus_path, "xx", "en", "validation")
    write_jsonl(tmp_path / "train.jsonl", [{"id": 7, "en": "A cat.", "de": "Eine Katze."}])
    with pytest.raises(ValueError, match=r"'fr'.*available languages: \['de', 'en'\]"):
        load_translation_split(str(tmp_path), "en", "fr", "train")


def test_same_source_and_target_language_is_an_error(corpus_path):
    with pytest.raises(ValueError, match="both 'en'"):
        load_translation_split(corpus_path, "en", "en", "validation")


def test_unknown_split_lists_available_splits(corpus_path):
    with pytest.raises(ValueError, match=r"'dev'.*available splits: \['test', 'train', 'validation'\]"):
        load_translation_split(corpus_path, "de", "en", "dev")


def test_missing_dataset_path_is_named(tmp_path):
    missing = str(tmp_path / "no_such_corpus")
    with pytest.raises(CorpusError, match="no_such_corpus"):
        load_translation_split(missing, "de", "en", "train")


# Cleaning


def test_cleaning_drops_and_counts_each_reason_in_tokens(caplog, tokenizer):
    def tokens(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    long_text = " ".join(["Ein Hund"] * 40)
    pairs = datasets.Dataset.from_dict(
        {
            "source": ["  Ein   Hund. ", "", "   ", long_text, "ein", "Zwei Katzen"],
            "target": ["A dog.", "Text", "Text", "words", "a b c d e f g h i j k l m n o", "\tTwo  cats\n"],
        }
    )
    rules = CleaningRules(max_tokens=tokens(long_text) - 1, max_length_ratio=9)
    with caplog.at_level(logging.INFO, logger="hf_vanilla.data.batches"):
        kept, dropped = clean_and_tokenize(pairs, tokenizer, rules)
    assert dropped == {"empty": 2, "too_long": 1, "length_ratio": 1}
    assert kept.select_columns(["source", "target"]).to_list() == [
        {"source": "Ein Hund.", "target": "A dog."},
        {"source": "Zwei Katzen", "target": "Two cats"},
    ]
    assert kept["input_ids"][0] == tokenizer("Ein Hund.")["input_ids"]
    assert (
        f"kept 2 of 6 pairs; dropped 2 empty, 1 over {rules.max_tokens} tokens, 1 with length ratio over 9"
        in caplog.text
    )


def test_cleaning_counts_tokens_so_that_a_script_without_spaces_is_kept():
    """A Chinese sentence is one white-space "word": counted in words,
    its pairs fall foul of the length ratio."""
    from hf_vanilla.data.tokenization import train_tokenizer

    english = ["A man is riding a bicycle down the street.", "Two dogs are playing in the snow together."]
    chinese = ["一个男人正骑着自行车沿街而行。", "两只狗正在雪地里一起玩耍。"]
    tokenizer = train_tokenizer(english + chinese, vocab_size=300, show_progress=False)
    pairs = datasets.Dataset.from_dict({"source": english, "target": chinese})
    kept, dropped = clean_and_tokenize(pairs, tokenizer, CleaningRules(max_length_ratio=1.5))
    assert len(kept) == 2 and not dropped


def test_cleaning_limits_are_configurable(tokenizer):
    pairs = datasets.Dataset.from_dict({"source": ["a b c", "a", "a b"], "target": ["x y z", "x y", "x y"]})
    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in ("a b", "x y")]
    kept, dropped = clean_and_tokenize(pairs, tokenizer, CleaningRules(max(lengths), 1.5))
    assert kept.select_columns(["source", "target"]).to_list() == [{"source": "a b", "target": "x y"}]
    assert dropped == {"too_long": 1, "length_ratio": 1}


# Tokenizing and collating


def test_reversed_targets_train_a_right_to_left_model_and_keep_the_text(tokenizer):
    pairs = datasets.Dataset.from_dict(
        {"source": ["Ein Mann  fährt.", "Hallo"], "target": ["A man\trides a bike.", "hello"]}
    )
    reversed_pairs, _ = clean_and_tokenize(pairs, tokenizer, CleaningRules(), reverse_target=True)
    assert reversed_pairs["labels"][0] == tokenizer("bike. a rides man A")["input_ids"]
    assert reversed_pairs["target"] == ["A man rides a bike.", "hello"]
    assert reverse_words(reverse_words(" a  b c. ")) == "a b c."


def test_tokenized_pairs_give_ids_and_labels_ending_in_eos(tokenized_validation):
    assert tokenized_validation.column_names == ["input_ids", "labels"]
    row = tokenized_validation[0]
    assert row["input_ids"][-1] == 2 and row["labels"][-1] == 2
    assert all(isinstance(token, int) for token in row["input_ids"] + row["labels"])


def test_example_lengths_follow_row_order(tokenized_validation):
    picked = tokenized_validation.select([5, 0, 3])
    expected = [[len(row["input_ids"]), len(row["labels"])] for row in picked]
    assert example_lengths(picked).tolist() == expected


def test_collator_pads_to_tensors_with_mask_and_ignored_labels(tokenizer, tokenized_validation):
    features = [tokenized_validation[i] for i in range(4)]
    batch = make_collator(tokenizer)(TokenizedRows(tokenized_validation).__getitems__(list(range(4))))
    longest_source = max(len(f["input_ids"]) for f in features)
    longest_target = max(len(f["labels"]) for f in features)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (4, longest_source)
    assert batch["labels"].shape == (4, longest_target)
    assert all(isinstance(batch[key], torch.Tensor) for key in ("input_ids", "attention_mask", "labels"))
    for row, feature in enumerate(features):
        source_length, target_length = len(feature["input_ids"]), len(feature["labels"])
        assert batch["attention_mask"][row].tolist() == [1] * source_length + [0] * (
            longest_source - source_length
        )
        assert (batch["input_ids"][row, source_length:] == 0).all()
        assert batch["labels"][row].tolist() == feature["labels"] + [-100] * (longest_target - target_length)


# Token batches


def assert_within_cap(batches, lengths, max_tokens):
    for batch in batches:
        assert len(batch) == 1 or (len(batch) * lengths[batch].max(axis=0) <= max_tokens).all()


def batches_of(sampler, epoch=0):
    sampler.set_epoch(epoch)
    return list(sampler)


def test_batches_cap_padded_tokens_and_cover_every_example_once(random_lengths):
    sampler = TokenBatchSampler(random_lengths, max_tokens=400)
    batches = batches_of(sampler)
    assert len(batches) == len(sampler)
    assert sorted(index for batch in batches for index in batch) == list(range(len(random_lengths)))
    assert_within_cap(batches, random_lengths, 400)


def test_example_longer_than_cap_gets_its_own_batch(random_lengths):
    batches = batches_of(TokenBatchSampler(random_lengths, max_tokens=200))
    assert [997] in batches and [998] in batches
    assert all(len(batch) > 1 for batch in batches if random_lengths[batch].max() <= 100)


def test_batches_group_similar_lengths(tokenized_validation):
    lengths = example_lengths(tokenized_validation)
    sampler = TokenBatchSampler(lengths, max_tokens=128)  # several batches of several sentences each
    unsorted_batches = np.array_split(np.random.default_rng(0).permutation(len(lengths)), len(sampler))
    assert padding_efficiency(sampler, lengths) > padding_efficiency(unsorted_batches, lengths)


def test_same_epoch_same_batches_other_epoch_other_order(random_lengths):
    sampler = TokenBatchSampler(random_lengths, max_tokens=400, seed=3)
    twin = TokenBatchSampler(random_lengths, max_tokens=400, seed=3)
    assert batches_of(sampler, epoch=1) == batches_of(twin, epoch=1)
    assert batches_of(sampler, epoch=1) != batches_of(sampler, epoch=2)
    assert batches_of(sampler, epoch=1) != batches_of(
        TokenBatchSampler(random_lengths, max_tokens=400, seed=4), 1
    )
    assert len(batches_of(sampler, epoch=2)) == len(sampler)


def test_without_shuffle_batches_come_shortest_first(random_lengths):
    batches = batches_of(TokenBatchSampler(random_lengths, max_tokens=400, shuffle=False))
    longest = [int(random_lengths[batch].max()) for batch in batches]
    assert longest == sorted(longest)


@pytest.mark.parametrize("num_replicas", [2, 3])
@pytest.mark.parametrize("max_tokens", [300, 400, 1000])
def test_shards_are_disjoint_complete_and_equal_length(random_lengths, num_replicas, max_tokens):
    shards = [
        batches_of(
            TokenBatchSampler(random_lengths, max_tokens, seed=1, num_replicas=num_replicas, rank=rank), 5
        )
        for rank in range(num_replicas)
    ]
    expected_length = len(TokenBatchSampler(random_lengths, max_tokens, num_replicas=num_replicas))
    assert [len(shard) for shard in shards] == [expected_length] * num_replicas
    indices = [index for shard in shards for batch in shard for index in batch]
    assert sorted(indices) == list(range(len(random_lengths)))


def test_sharding_splits_batches_when_count_does_not_divide(random_lengths):
    unsharded = TokenBatchSampler(random_lengths, max_tokens=300)
    assert len(unsharded) % 2 == 1
    sharded = TokenBatchSampler(random_lengths, max_tokens=300, num_replicas=2)
    assert len(sharded) == (len(unsharded) + 1) // 2
    assert_within_cap(batches_of(sharded), random_lengths, 300)


def test_too_few_examples_for_replicas_is_an_error():
    with pytest.raises(ValueError, match="cannot fill 4 replicas"):
        TokenBatchSampler([[3, 3], [4, 4]], max_tokens=100, num_replicas=4, rank=0)
    with pytest.raises(ValueError, match="rank 2"):
        TokenBatchSampler([[3, 3], [4, 4]], max_tokens=100, num_replicas=2, rank=2)


def test_padding_efficiency_counts_source_and_target():
    lengths = [[2, 3], [4, 1], [5, 5]]
    # batch [0, 1] pads to 2 * (4 + 3) = 14 for 10 real tokens; batch [2] has no padding.
    assert padding_efficiency([[0, 1], [2]], lengths) == pytest.approx((10 + 10) / (14 + 10))


def test_sampler_drives_a_dataloader(tokenizer, tokenized_validation):
    lengths = example_lengths(tokenized_validation)
    sampler = TokenBatchSampler(lengths, max_tokens=256)
    loader = torch.utils.data.DataLoader(
        TokenizedRows(tokenized_validation), batch_sampler=sampler, collate_fn=make_collator(tokenizer)
    )
    batches = list(loader)
    assert len(batches) == len(sampler)
    assert sum(batch["input_ids"].shape[0] for batch in batches) == len(tokenized_validation)
    assert all(batch["input_ids"].numel() <= 256 and batch["labels"].numel() <= 256 for batch in batches)


@pytest.mark.parametrize("num_replicas", [1, 3])
def test_shape_buckets_cover_every_example_once_in_a_few_fixed_shapes(random_lengths, num_replicas):
    samplers = [
        ShapeBucketBatchSampler(random_lengths, 1024, seed=3, num_replicas=num_replicas, rank=rank)
        for rank in range(num_replicas)
    ]
    for sampler in samplers:
        sampler.set_epoch(2)
    shares = [list(sampler) for sampler in samplers]
    assert len({len(share) for share in shares}) == 1  # every replica the same number of batches
    seen = [index for share in shares for batch in share for index in batch]
    assert sorted(seen) == list(range(len(random_lengths)))
    shapes = samplers[0].shapes
    assert len(shapes) <= 12
    longest = random_lengths.max(axis=1)
    buckets = samplers[0].bucket_lengths
    for batch in (batch for share in shares for batch in share if batch):
        length = buckets[int(np.searchsorted(buckets, longest[batch].max()))]
        assert (longest[batch] > ([0, *buckets][buckets.index(length)])).all()  # all of one bucket
        assert len(batch) <= samplers[0].rows_for(length)


def test_shape_bucket_batches_pad_to_their_bucket_and_keep_padding_out_of_the_loss(
    tokenizer, tokenized_validation
):
    """Every batch has its bucket's rows x length; the labelled tokens are exactly the real targets, and a
    model's summed loss over them equals the one over the same examples padded to their longest."""
    from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from hf_vanilla.data.tokenization import config_kwargs_from_tokenizer
    from hf_vanilla.training.loss import label_smoothed_cross_entropy

    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("tiny", **config_kwargs_from_tokenizer(tokenizer))
    ).eval()
    lengths = example_lengths(tokenized_validation)
    sampler = ShapeBucketBatchSampler(lengths, 256, seed=0, num_replicas=2)
    plain = make_collator(tokenizer, model)
    bucketed = make_collator(tokenizer, model, sampler)
    rows = TokenizedRows(tokenized_validation)
    shapes = set(sampler.shapes)
    for batch_indices in sampler:
        examples = [tokenized_validation[index] for index in batch_indices]
        batch = bucketed(rows.__getitems__(batch_indices))
        assert (batch["input_ids"].shape[0], batch["input_ids"].shape[1]) in shapes
        assert batch["labels"].shape == batch["input_ids"].shape == batch["decoder_input_ids"].shape
        assert int((batch["labels"] != -100).sum()) == sum(len(example["labels"]) for example in examples)
        if not examples:
            continue
        reference = plain(rows.__getitems__(batch_indices))

        def summed_loss(collated):
            inputs = {name: tensor for name, tensor in collated.items() if name != "labels"}
            logits = model(**inputs, use_cache=False).logits
            return label_smoothed_cross_entropy(logits.flatten(0, 1), collated["labels"].flatten(), 0.1, 1)

        with torch.no_grad():
            torch.testing.assert_close(summed_loss(batch), summed_loss(reference), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape_buckets", [False, True])
@pytest.mark.parametrize("with_model", [False, True])
def test_collator_makes_the_batches_of_transformers_seq2seq_collator(
    tokenizer, tokenized_validation, shape_buckets, with_model
):
    """The numpy padding of Arrow rows gives, bit for bit, what DataCollatorForSeq2Seq gave on per-row lists
    (the collation training used before): the same keys in the same order, dtypes, shapes, values, and in
    shape buckets the same filler rows (one end-of-sentence token, no label), for random batches."""
    from transformers import DataCollatorForSeq2Seq

    from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from hf_vanilla.data.tokenization import config_kwargs_from_tokenizer

    model = (
        VanillaTransformerForConditionalGeneration(
            VanillaTransformerConfig.from_preset("tiny", **config_kwargs_from_tokenizer(tokenizer))
        )
        if with_model
        else None
    )
    reference = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")
    sampler = ShapeBucketBatchSampler(example_lengths(tokenized_validation), 512, seed=4)
    collator = make_collator(tokenizer, model, sampler if shape_buckets else None)
    rows = TokenizedRows(tokenized_validation)
    rng = np.random.default_rng(7)
    batches = [rng.choice(len(rows), size=rng.integers(1, 40), replace=False).tolist() for _ in range(30)]
    if shape_buckets:
        batches = [*sampler, []]  # every bucket, its last batch with filler rows, a batch of filler only
    for indices in batches:
        features = [tokenized_validation[index] for index in indices]
        if shape_buckets:
            length = sampler.bucket_for(max((max(map(len, row.values())) for row in features), default=1))
            filler = {"input_ids": [tokenizer.eos_token_id], "labels": [-100]}
            features += [filler] * (sampler.rows_for(length) - len(features))
            reference = dataclasses.replace(reference, padding="max_length", max_length=length)
        expected, batch = reference(features), collator(rows.__getitems__(indices))
        assert list(batch) == list(expected)
        for name, tensor in expected.items():
            assert batch[name].dtype == tensor.dtype, name
            assert torch.equal(batch[name], tensor), name
