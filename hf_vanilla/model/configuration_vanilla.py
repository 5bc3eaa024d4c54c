"""Configuration of the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

import sys

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

# Section 6.2, table 3 ("base" and "big"), plus smaller shapes for small data and tests. Values not named
# here come from the class defaults, which are the paper's base model.
PRESETS: dict[str, dict] = {
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "num_attention_heads": 16, "dropout": 0.3},
    # The shape of the same-budget MarianMT peer on Multi30k (7.7M parameters with an 8k vocabulary).
    "small": {
        "d_model": 256,
        "d_ff": 1024,
        "num_attention_heads": 4,
        "encoder_layers": 3,
        "decoder_layers": 3,
    },
    "tiny": {"d_model": 32, "d_ff": 64, "num_attention_heads": 4, "encoder_layers": 2, "decoder_layers": 2},
}


# The sizes that fix the shapes of the weights.
SIZE_FIELDS = (
    "vocab_size",
    "d_model",
    "d_ff",
    "num_attention_heads",
    "encoder_layers",
    "decoder_layers",
    "max_position_embeddings",
)

# The regularisers: off (0) in the paper's recipe but for `dropout`.
DROPOUT_FIELDS = (
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "layer_dropout",
    "source_word_dropout",
    "target_word_dropout",
)


@strict
class VanillaTransformerConfig(PreTrainedConfig):
    r"""
    The paper's encoder-decoder with one embedding matrix shared by the encoder input, the decoder input
    and the pre-softmax projection. Defaults are the base model (N=6, d_model=512, d_ff=2048, h=8,
    P_drop=0.1); `VanillaTransformerConfig.from_preset("big")` gives table 3's big model. Label smoothing
    (5.4) is a training setting (`hf_vanilla.training.settings.TrainingConfig.label_smoothing`); the model's
    own loss is plain cross-entropy.

    Departures from the paper are switches that are off by default:
    - `tie_word_embeddings=False`: a pre-softmax projection of its own; the encoder and decoder inputs still
      share one embedding matrix.
    - `pre_layernorm`: LayerNorm before each sublayer (x + Sublayer(LayerNorm(x))) and after each stack, which
      trains more stably at depth (Xiong et al., 2020). The paper is post-LN: LayerNorm(x + Sublayer(x)).
    - `attention_dropout` / `activation_dropout`: dropout on attention probabilities / after the ReLU, which
      the paper does not describe (section 5.4 drops out sublayer outputs and embedding sums only) but
      small-data recipes use.
    - `layer_dropout`: LayerDrop (Fan et al., 2019), each encoder and decoder layer skipped with this
      probability in training.
    - `source_word_dropout` / `target_word_dropout`: each source / decoder-input token's embedding zeroed with
      this probability in training, so the model cannot lean on any one word (Gal and Ghahramani, 2016;
      Sennrich et al., 2016); the labels are untouched.
    - `right_to_left`: the model was trained to write each translation's words last first (reversed target
      words, `TrainingConfig.right_to_left`), to rerank a left-to-right model's n-best list (Sennrich et al.,
      2016; `hf_vanilla.research.reranking`). The weights are the same; our translation helpers and pipeline
      put the words back in reading order, and an ensemble refuses to mix the two orders.

    `tokenizer_fingerprint` records the vocabulary the model was trained with
    (`hf_vanilla.model.decoding.tokenizer_fingerprint`, 16 hex digits); loading with our scripts or the
    pipeline refuses a tokenizer whose vocabulary differs. None (configs saved before it was recorded): not
    checked.
    """

    model_type = "vanilla_transformer"
    # The output's cache: its name since transformers 5.24, and the one before.
    keys_to_ignore_at_inference = ["cache", "past_key_values"]
    attribute_map = {"hidden_size": "d_model", "num_hidden_layers": "encoder_layers"}

    vocab_size: int = 37000
    d_model: int = 512
    d_ff: int = 2048
    num_attention_heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    layer_dropout: float | int = 0.0
    source_word_dropout: float | int = 0.0
    target_word_dropout: float | int = 0.0
    max_position_embeddings: int = 1024
    layer_norm_eps: float = 1e-6
    pre_layernorm: bool = False
    right_to_left: bool = False
    # As PreTrainedConfig takes them: None where a token is absent,
    # several end ids where generate stops at any.
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int = 1
    tokenizer_fingerprint: str | None = None
    tie_word_embeddings: bool = True
    is_encoder_decoder: bool = True
    use_cache: bool = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self._check_fields()

    def _check_fields(self):
        """Raise a ValueError naming the field when a size, rate or token id cannot work."""
        for name in SIZE_FIELDS:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.d_model % self.num_attention_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.d_model % 2:
            raise ValueError(
                f"d_model must be even for the sinusoidal positional encoding, got {self.d_model}"
            )
        for name in DROPOUT_FIELDS:
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps}")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            token_ids = value if isinstance(value, list) else [] if value is None else [value]
            if not all(0 <= token_id < self.vocab_size for token_id in token_ids):
                raise ValueError(f"{name} must be in [0, vocab_size={self.vocab_size}), got {value}")

    @property
    def carried_pipelines(self) -> dict[str, dict]:
        """config.json's `custom_pipelines`: task -> the pipeline whose code the checkpoint carries."""
        return self.__dict__.get("custom_pipelines") or {}

    @property
    def custom_pipelines(self) -> dict[str, dict]:
        """The carried pipelines whose task the installed code base of this config does not register itself.

        transformers' `pipeline(task, ...)` runs a config's custom pipeline only with trust_remote_code=True,
        even where the package that wrote the checkpoint is imported and registers the same task; hiding that
        task here lets `pipeline(task, model=checkpoint)` run the installed pipeline. The saved config keeps
        every entry.
        """
        # Nothing is registered before transformers.pipelines is imported,
        # and importing it here would be slow.
        pipelines = sys.modules.get("transformers.pipelines")
        registered = pipelines.PIPELINE_REGISTRY.supported_tasks if pipelines is not None else {}
        code_base = type(self).__module__.rpartition(".")[0]
        return {
            task: entry
            for task, entry in self.carried_pipelines.items()
            if getattr(registered.get(task, {}).get("impl"), "__module__", "").rpartition(".")[0] != code_base
        }

    @custom_pipelines.setter
    def custom_pipelines(self, pipelines: dict[str, dict]) -> None:
        self.__dict__["custom_pipelines"] = pipelines

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_attention_heads

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "VanillaTransformerConfig":
        """A named model size (`base`, `big`, `small`, `tiny`) with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


__all__ = ["DROPOUT_FIELDS", "PRESETS", "SIZE_FIELDS", "VanillaTransformerConfig"]
