"""Behaviour of the model a user relies on, on tiny configs."""

import json
import logging
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from hf_vanilla import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)
from hf_vanilla.model.modeling_vanilla import CACHE_NAME, shift_tokens_right, sinusoidal_positions
from hf_vanilla.training.schedule import inverse_sqrt_factor

VOCAB = 40


def tiny_model(**overrides) -> VanillaTransformerForConditionalGeneration:
    config = VanillaTransformerConfig.from_preset("tiny", vocab_size=VOCAB, **overrides)
    return VanillaTransformerForConditionalGeneration(config).eval()


def random_ids(batch: int, length: int) -> torch.Tensor:
    return torch.randint(4, VOCAB, (batch, length))


def test_forward_shapes_and_loss():
    model = tiny_model()
    source, labels = random_ids(3, 7), random_ids(3, 5)
    out = model(input_ids=source, labels=labels)
    assert out.logits.shape == (3, 5, VOCAB)
    assert out.encoder_last_hidden_state.shape == (3, 7, 32)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)


def test_loss_is_plain_cross_entropy_ignoring_minus_100():
    model = tiny_model()
    source, labels = random_ids(2, 6), random_ids(2, 5)
    labels[1, 3:] = -100
    out = model(input_ids=source, labels=labels)
    keep = labels != -100
    expected = F.cross_entropy(out.logits[keep], labels[keep])
    torch.testing.assert_close(out.loss, expected)
    summed = model(input_ids=source, labels=labels, num_items_in_batch=keep.sum() * 2).loss
    torch.testing.assert_close(summed, expected / 2)


def test_decoder_inputs_are_labels_shifted_right():
    labels = torch.tensor([[5, 6, 7, 2], [8, 2, -100, -100]])
    assert shift_tokens_right(labels, pad_token_id=0, decoder_start_token_id=1).tolist() == [
        [1, 5, 6, 7],
        [1, 8, 2, 0],
    ]


def test_positional_encoding_is_the_papers_interleaved_sinusoid_and_not_saved():
    table = sinusoidal_positions(50, 16)
    pos, i = 7, 3
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert not any("table" in key for key in tiny_model().state_dict())


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = tiny_model()
    ids = random_ids(1, 4)
    embeddings = model.model.encoder.embeddings
    expected = model.model.shared(ids) * math.sqrt(32) + embeddings.embed_positions.table[:4]
    torch.testing.assert_close(embeddings(ids), expected)


def test_padding_source_changes_no_logits_of_real_positions():
    model = tiny_model()
    source, decoder_ids = random_ids(1, 6), random_ids(1, 5)
    plain = model(input_ids=source, decoder_input_ids=decoder_ids).logits
    padded_source = torch.cat([source, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = (padded_source != 0).long()
    padded = model(input_ids=padded_source, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    torch.testing.assert_close(padded, plain, atol=1e-5, rtol=0)


def test_batched_padded_inputs_match_single_inputs():
    model = tiny_model()
    long_source, short_source = random_ids(1, 8), random_ids(1, 5)
    batch = torch.zeros(2, 8, dtype=torch.long)
    batch[0], batch[1, :5] = long_source[0], short_source[0]
    decoder_ids = random_ids(2, 4)
    batched = model(input_ids=batch, attention_mask=(batch != 0).long(), decoder_input_ids=decoder_ids).logits
    single = model(input_ids=short_source, decoder_input_ids=decoder_ids[1:]).logits
    torch.testing.assert_close(batched[1:], single, atol=1e-5, rtol=0)


def test_decoder_is_causal():
    model = tiny_model()
    source, decoder_ids = random_ids(1, 6), random_ids(1, 6)
    before = model(input_ids=source, decoder_input_ids=decoder_ids).logits
    changed = decoder_ids.clone()
    changed[0, 4] = (changed[0, 4] + 1) % VOCAB
    after = model(input_ids=source, decoder_input_ids=changed).logits
    torch.testing.assert_close(after[:, :4], before[:, :4], atol=1e-6, rtol=0)
    assert not torch.allclose(after[:, 4:], before[:, 4:])


@pytest.mark.parametrize("pre_layernorm", [False, True])
def test_eager_and_sdpa_agree(pre_layernorm):
    model = tiny_model(pre_layernorm=pre_layernorm)
    source, labels = random_ids(2, 7), random_ids(2, 5)
    mask = torch.ones_like(source)
    mask[1, 4:] = 0
    outputs = {}
    for implementation in ("eager", "sdpa"):
        model.set_attn_implementation(implementation)
        outputs[implementation] = model(input_ids=source, attention_mask=mask, labels=labels).logits
    torch.testing.assert_close(outputs["eager"], outputs["sdpa"], atol=1e-5, rtol=1e-5)


def test_pre_layernorm_is_a_different_function_with_final_norms():
    post, pre = tiny_model(), tiny_model(pre_layernorm=True)
    assert post.model.encoder.final_layer_norm is None and pre.model.encoder.final_layer_norm is not None
    pre.load_state_dict(post.state_dict(), strict=False)
    source, decoder_ids = random_ids(1, 5), random_ids(1, 4)
    assert not torch.allclose(
        post(input_ids=source, decoder_input_ids=decoder_ids).logits,
        pre(input_ids=source, decoder_input_ids=decoder_ids).logits,
    )


def test_attention_maps_and_hidden_states_are_returned():
    model = tiny_model()
    model.set_attn_implementation("eager")
    source, labels = random_ids(2, 7), random_ids(2, 5)
    out = model(input_ids=source, labels=labels, output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_attentions) == 2 and out.encoder_attentions[0].shape == (2, 4, 7, 7)
    assert len(out.decoder_attentions) == 2 and out.decoder_attentions[0].shape == (2, 4, 5, 5)
    assert len(out.cross_attentions) == 2 and out.cross_attentions[0].shape == (2, 4, 5, 7)
    torch.testing.assert_close(out.cross_attentions[0].sum(-1), torch.ones(2, 4, 5))
    assert out.decoder_attentions[0][0, 0].triu(1).abs().max() == 0  # nothing attends to the future
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 3


def test_one_embedding_matrix_shared_by_encoder_decoder_and_output_projection():
    model = tiny_model()
    shared = model.model.shared.weight
    assert model.lm_head.weight is shared
    assert model.model.encoder.embeddings.embed_tokens.weight is shared
    assert model.model.decoder.embeddings.embed_tokens.weight is shared


def test_xavier_uniform_init():
    model = tiny_model()
    weight = model.model.encoder.layers[0].feed_forward.fc1.weight  # (64, 32)
    bound = math.sqrt(6 / (32 + 64))
    assert weight.abs().max() <= bound and weight.abs().max() > 0.9 * bound
    assert model.model.encoder.layers[0].feed_forward.fc1.bias.abs().max() == 0


def test_save_and_load_round_trip(tmp_path):
    model = tiny_model()
    source, labels = random_ids(2, 6), random_ids(2, 4)
    before = model(input_ids=source, labels=labels).logits
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        embedding_keys = [k for k in weights.keys() if "embed" in k or "shared" in k or "lm_head" in k]
        assert not any("table" in k for k in weights.keys())
    assert embedding_keys == ["model.shared.weight"]
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded(input_ids=source, labels=labels).logits, before)
    assert loaded.lm_head.weight is loaded.model.shared.weight
    assert loaded.model.encoder.embeddings.embed_tokens.weight is loaded.model.shared.weight
    assert torch.equal(loaded.model.decoder.embeddings.embed_positions.table, sinusoidal_positions(1024, 32))


def test_auto_classes_resolve(tmp_path):
    config = VanillaTransformerConfig.from_preset("tiny", vocab_size=VOCAB)
    assert isinstance(AutoModelForSeq2SeqLM.from_config(config), VanillaTransformerForConditionalGeneration)
    assert isinstance(AutoModel.from_config(config), VanillaTransformerModel)
    config.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), VanillaTransformerConfig)


def test_trust_remote_code_load_in_a_process_that_never_imported_hf_vanilla(tmp_path):
    model = tiny_model()
    source = random_ids(1, 5)
    expected = model.generate(input_ids=source, max_new_tokens=5, do_sample=False)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"]
    script = f"""
import sys, torch
from transformers import AutoModelForSeq2SeqLM
model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
assert "hf_vanilla" not in sys.modules, "hf_vanilla was imported"
print(model.generate(input_ids=torch.tensor({source.tolist()}), max_new_tokens=5, do_sample=False).tolist())
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(expected.tolist())


@pytest.mark.parametrize(
    "generation", [dict(num_beams=1), dict(num_beams=3, length_penalty=0.6, early_stopping=True)]
)
def test_generate_with_cache_equals_without(generation):
    model = tiny_model()
    source = random_ids(3, 6)
    mask = torch.ones_like(source)
    mask[2, 3:] = 0
    kwargs = dict(input_ids=source, attention_mask=mask, max_new_tokens=8, do_sample=False, **generation)
    cached = model.generate(**kwargs, use_cache=True)
    uncached = model.generate(**kwargs, use_cache=False)
    assert torch.equal(cached, uncached)
    assert (cached[:, 0] == model.config.decoder_start_token_id).all()


def test_sampling_and_multiple_return_sequences():
    model = tiny_model()
    source = random_ids(2, 5)
    out = model.generate(
        input_ids=source,
        do_sample=True,
        top_k=10,
        top_p=0.9,
        temperature=0.8,
        max_new_tokens=4,
        num_return_sequences=3,
    )
    assert out.shape[0] == 6 and out.shape[1] <= 5
    beams = model.generate(input_ids=source, num_beams=4, num_return_sequences=2, max_new_tokens=4)
    assert beams.shape[0] == 4


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(d_model=30, num_attention_heads=4), "d_model"),
        (dict(num_attention_heads=0), "num_attention_heads"),
        (dict(encoder_layers=-1), "encoder_layers"),
        (dict(dropout=1.0), "dropout"),
        (dict(pad_token_id=VOCAB), "pad_token_id"),
        (dict(eos_token_id=[2, VOCAB]), "eos_token_id"),
        (dict(decoder_start_token_id=-1), "decoder_start_token_id"),
    ],
)
def test_invalid_config_raises_value_error_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        VanillaTransformerConfig.from_preset("tiny", vocab_size=VOCAB, **overrides)


def test_special_tokens_are_taken_as_pretrained_config_takes_them(copy_model):
    """None where a token is absent, and several end ids, which generate stops at (transformers' own tests set
    eos_token_id to None to generate to the length asked)."""
    config = VanillaTransformerConfig.from_preset(
        "tiny", vocab_size=VOCAB, bos_token_id=None, eos_token_id=[2, 3]
    )
    config.eos_token_id = None
    source = copy_sources(2)
    copied = copy_model.generate(input_ids=source, max_new_tokens=12)
    assert copied.shape[1] < 13 and (copied[:, 9] == 2).all()  # the learned end id stops it
    to_length = copy_model.generate(input_ids=source, max_new_tokens=12, eos_token_id=None)
    assert to_length.shape[1] == 13
    first_copied = int(source[0, 0])
    stopped = copy_model.generate(input_ids=source[:1], max_new_tokens=12, eos_token_id=[first_copied, 2])
    assert stopped.tolist() == [[copy_model.config.decoder_start_token_id, first_copied]]


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="base"):
        VanillaTransformerConfig.from_preset("huge")


def test_presets_are_the_papers_models():
    base, big = VanillaTransformerConfig(), VanillaTransformerConfig.from_preset("big")
    assert (base.encoder_layers, base.d_model, base.d_ff, base.num_attention_heads, base.dropout) == (
        6,
        512,
        2048,
        8,
        0.1,
    )
    assert (big.d_model, big.d_ff, big.num_attention_heads, big.dropout) == (1024, 4096, 16, 0.3)
    assert not base.pre_layernorm and base.tie_word_embeddings


def test_token_ids_outside_the_vocabulary_raise_a_clear_error():
    model = tiny_model()
    with pytest.raises(ValueError, match="vocab_size=40"):
        model(input_ids=torch.tensor([[5, VOCAB]]), decoder_input_ids=torch.tensor([[1]]))


def test_source_longer_than_max_positions_raises_a_clear_error():
    model = tiny_model(max_position_embeddings=16)
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        model(input_ids=random_ids(1, 17), decoder_input_ids=torch.tensor([[1]]))


@pytest.fixture(scope="module")
def copy_model() -> VanillaTransformerForConditionalGeneration:
    """The copy task of the Annotated Transformer, learned: a model whose decoding depends on what it
    learned."""
    torch.manual_seed(0)
    config = VanillaTransformerConfig.from_preset(
        "tiny", vocab_size=14, d_model=64, d_ff=128, dropout=0.0
    )
    model = VanillaTransformerForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    # 5.3's warm-up then inverse-sqrt decay: without the decay the last updates are noisy enough that which
    # sequences come out exact depends on the CPU's arithmetic (AVX2 or AVX512 kernels).
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: inverse_sqrt_factor(step + 1, 100))
    model.train()
    for _ in range(400):
        source = torch.randint(4, 14, (64, 8))
        labels = torch.cat([source, torch.full((64, 1), config.eos_token_id)], dim=1)
        loss = model(input_ids=source, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    return model.eval()


def copy_sources(count: int) -> torch.Tensor:
    return torch.randint(4, 14, (count, 8), generator=torch.Generator().manual_seed(1))


def test_learns_to_copy_random_sequences(copy_model):
    """A real learning test: greedy decoding must copy."""
    source = copy_sources(16)
    generated = copy_model.generate(input_ids=source, max_new_tokens=10, do_sample=False, num_beams=1)
    assert (generated[:, 1:9] == source).float().mean() >= 0.97  # chance is 0.1
    assert (generated[:, 9] == copy_model.config.eos_token_id).all()


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_trained_model_decodes_the_same_tokens_with_and_without_a_cache(
    copy_model, implementation, cache, num_beams
):
    """On weights that learned something, every step's logits matter: the cached path must not drift from the
    uncached one (transformers 5.24 renamed the cache argument; a model that missed it decoded other
    tokens)."""
    copy_model.set_attn_implementation(implementation)
    source = copy_sources(6)
    mask = torch.ones_like(source)
    mask[1, 5:] = 0  # a padded source too
    source = source.masked_fill(mask == 0, copy_model.config.pad_token_id)
    kwargs = dict(
        input_ids=source, attention_mask=mask, max_new_tokens=10, do_sample=False, num_beams=num_beams
    )
    try:
        uncached = copy_model.generate(**kwargs, use_cache=False)
        static = {"cache_implementation": "static"} if cache == "static" else {}
        cached = copy_model.generate(**kwargs, **static)
    finally:
        copy_model.set_attn_implementation("sdpa")
    assert torch.equal(cached, uncached)
    assert (cached[[0, 2, 3, 4, 5], 1:9] == source[[0, 2, 3, 4, 5]]).float().mean() >= 0.9  # it still copies


def test_forward_and_generate_warn_of_nothing(copy_model, recwarn, caplog):
    """No deprecation notice (or any other) from the calls every user makes, on any supported transformers."""
    source = copy_sources(2)
    copy_model(input_ids=source, decoder_input_ids=source[:, :3])
    copy_model.generate(input_ids=source, max_new_tokens=4)
    copy_model.generate(input_ids=source, max_new_tokens=4, num_beams=2)
    assert [str(warning.message) for warning in recwarn] == []
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []


def test_gradients_reach_every_parameter_once_through_the_shared_embedding():
    model = tiny_model().train()
    loss = model(input_ids=random_ids(2, 5), labels=random_ids(2, 4)).loss
    loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert missing == []
    assert [
        name for name, _ in model.named_parameters() if any(k in name for k in ("embed", "lm_head", "shared"))
    ] == ["model.shared.weight"]


def test_untied_output_projection_is_its_own_matrix_and_reloads(tmp_path):
    model = tiny_model(tie_word_embeddings=False)
    assert model.lm_head.weight is not model.model.shared.weight
    assert model.model.encoder.embeddings.embed_tokens.weight is model.model.shared.weight
    assert model.model.decoder.embeddings.embed_tokens.weight is model.model.shared.weight
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", framework="pt") as saved:
        assert {"lm_head.weight", "model.shared.weight"} <= set(saved.keys())
    reloaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path)
    batch = {"input_ids": random_ids(2, 5), "decoder_input_ids": random_ids(2, 4)}
    torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)


def test_config_json_with_the_former_label_smoothing_key_loads(tmp_path):
    tiny_model().config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "label_smoothing": 0.1}))
    assert VanillaTransformerConfig.from_pretrained(tmp_path).d_model == 32


@pytest.mark.parametrize("implementation", ["sdpa", "vanilla_sdpa_matmuls", "vanilla_sdpa_auto"])
def test_output_attentions_with_sdpa_masks_gives_the_eager_weights(implementation):
    model = tiny_model()
    batch = {"input_ids": random_ids(2, 5), "decoder_input_ids": random_ids(2, 4)}
    batch["attention_mask"] = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    outputs = {}
    for name in ("eager", implementation):
        model.set_attn_implementation(name)
        outputs[name] = model(**batch, output_attentions=True)
    for field in ("encoder_attentions", "decoder_attentions", "cross_attentions", "logits"):
        torch.testing.assert_close(getattr(outputs[implementation], field), getattr(outputs["eager"], field))


def test_plain_forward_honours_config_use_cache_and_accepts_a_dynamic_cache():
    """The cache goes in and comes out under the installed transformers' name (`cache` since 5.24)."""
    model = tiny_model()
    source, target = random_ids(2, 5), random_ids(2, 4)
    assert getattr(model(input_ids=source, decoder_input_ids=target), CACHE_NAME).get_seq_length() == 4
    model.config.use_cache = False
    assert getattr(model(input_ids=source, decoder_input_ids=target), CACHE_NAME) is None
    full = model(input_ids=source, decoder_input_ids=target).logits
    first = model(
        input_ids=source, decoder_input_ids=target[:, :3], **{CACHE_NAME: DynamicCache()}, use_cache=True
    )
    assert isinstance(getattr(first, CACHE_NAME), EncoderDecoderCache)
    last = model(
        input_ids=source, decoder_input_ids=target[:, 3:], **{CACHE_NAME: getattr(first, CACHE_NAME)}
    )
    torch.testing.assert_close(last.logits, full[:, 3:])


REGULARISERS = ("layer_dropout", "source_word_dropout", "target_word_dropout")


def logits_of(model, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    inputs = {"input_ids": random_ids(4, 9), "labels": random_ids(4, 7)}
    torch.manual_seed(seed + 1)  # the same draws of the switches for both models
    return model(**inputs).logits


@pytest.mark.parametrize("name", REGULARISERS)
def test_regularisers_are_off_by_default_and_act_only_in_training(name):
    """LayerDrop and word dropout: a model with the switch at 0 is today's model; on, training-mode outputs
    change (a layer or a word gone) while evaluation-mode outputs do not."""
    assert getattr(VanillaTransformerConfig(), name) == 0
    torch.manual_seed(0)
    plain = tiny_model(dropout=0.0)
    switched = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("tiny", vocab_size=VOCAB, dropout=0.0, **{name: 0.5})
    )
    switched.load_state_dict(plain.state_dict())
    switched.eval()
    torch.testing.assert_close(logits_of(switched), logits_of(plain))
    plain.train(), switched.train()
    assert not torch.allclose(logits_of(switched), logits_of(plain))


@pytest.mark.parametrize("name", REGULARISERS)
def test_a_regulariser_rate_outside_0_to_1_is_refused_naming_it(name):
    with pytest.raises(ValueError, match=f"{name} must be in"):
        VanillaTransformerConfig.from_preset("tiny", vocab_size=VOCAB, **{name: 1.0})
