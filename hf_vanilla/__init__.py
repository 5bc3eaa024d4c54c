"""hf_vanilla: the Transformer of "Attention Is All You Need" as a native Hugging Face model."""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from hf_vanilla.model.configuration_vanilla import PRESETS, VanillaTransformerConfig
from hf_vanilla.model.modeling_vanilla import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
)

AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(
    VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True
)
# A saved directory then carries the config and modeling files and loads with trust_remote_code=True.
VanillaTransformerConfig.register_for_auto_class()
VanillaTransformerModel.register_for_auto_class("AutoModel")
VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

from hf_vanilla.model.pipeline import VanillaTranslationPipeline  # noqa: E402  registers the "vanilla-translation" task

__all__ = [
    "PRESETS",
    "VanillaTransformerConfig",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "VanillaTranslationPipeline",
]
