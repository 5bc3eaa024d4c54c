"""The paper's steps done by hand, as docs/walkthrough.ipynb shows them, agree with the model's modules: the
heads of 3.2.2 split, attended and merged through Concat(head_i) W^O, and the three (B,1,T,S) masks of 3.2.3
that a padded batch gives the encoder's self-attention, the decoder's and the attention over the encoder."""

import math

import torch

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.model.modeling_vanilla import shift_tokens_right

PAD, START, EOS = 0, 1, 2


def tiny_model() -> VanillaTransformerForConditionalGeneration:
    config = VanillaTransformerConfig.from_preset(
        "tiny",
        vocab_size=20,
        pad_token_id=PAD,
        bos_token_id=START,
        eos_token_id=EOS,
        decoder_start_token_id=START,
    )
    model = VanillaTransformerForConditionalGeneration(config).eval()
    model.set_attn_implementation("eager")  # the formula of 3.2.1, its masks handed over as 0 and -inf
    return model


def test_heads_by_hand_are_the_multi_head_attention():
    torch.manual_seed(0)
    model = tiny_model()
    attention, config = model.model.encoder.layers[0].self_attn, model.config
    x = torch.randn(2, 5, config.d_model)
    w_q, w_k, w_v = attention.qkv_proj.weight.chunk(3)
    d_k = config.head_dim
    heads = []
    for i in range(config.num_attention_heads):
        rows = slice(i * d_k, (i + 1) * d_k)
        q, k, v = x @ w_q[rows].T, x @ w_k[rows].T, x @ w_v[rows].T
        heads.append(torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1) @ v)
    with torch.no_grad():
        output, _ = attention(x)
    torch.testing.assert_close(torch.cat(heads, dim=-1) @ attention.out_proj.weight.T, output)


def received_masks(model, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each first-layer attention module's mask as it receives it, True where query t may see key s."""
    modules = {
        "encoder": model.model.encoder.layers[0].self_attn,
        "decoder": model.model.decoder.layers[0].self_attn,
        "cross": model.model.decoder.layers[0].encoder_attn,
    }
    received = {}

    def keeper(name):
        def keep(module, args, kwargs):
            received[name] = kwargs["attention_mask"] == 0

        return keep

    handles = [
        module.register_forward_pre_hook(keeper(name), with_kwargs=True) for name, module in modules.items()
    ]
    with torch.no_grad():
        model(**batch)
    for handle in handles:
        handle.remove()
    return received


def test_the_three_masks_of_a_padded_batch():
    labels = torch.tensor(
        [[5, 6, 7, EOS, -100, -100], [8, 9, 10, 11, 12, EOS], [13, EOS, -100, -100, -100, -100]]
    )
    source = labels.masked_fill(labels == -100, PAD)
    decoder_input_ids = shift_tokens_right(labels, PAD, START)
    assert decoder_input_ids[:, 0].eq(START).all() and decoder_input_ids[0, 5] == PAD
    batch = {
        "input_ids": source,
        "attention_mask": (labels != -100).long(),
        "decoder_input_ids": decoder_input_ids,
        "decoder_attention_mask": (decoder_input_ids != PAD).long(),
    }
    received = received_masks(tiny_model(), batch)

    real_source = batch["attention_mask"].bool()[:, None, None, :]
    real_target = batch["decoder_attention_mask"].bool()[:, None, None, :]
    length = labels.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    assert torch.equal(received["encoder"], real_source.expand(-1, -1, length, -1))
    assert torch.equal(received["decoder"], causal & real_target)
    assert torch.equal(received["cross"], real_source.expand(-1, -1, length, -1))
