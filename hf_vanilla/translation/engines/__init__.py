"""The engines that decode translations, in one home: the protocol every caller uses, the abilities an engine
may have beyond it, and the registry that loads one by name (`load_engine`). Two register themselves here:
transformers' `generate` (the reference, every ability but the vocabulary map) and CTranslate2 (the same
decoding, faster; converted on first use, its library imported only then)."""

from hf_vanilla.translation.engines.base import (
    ATTENTION,
    COMPUTE_TYPES,
    LOGITS_PROCESSORS,
    NBEST_SCORES,
    SAMPLING,
    VOCABULARY_MAP,
    EngineSettings,
    TranslationEngine,
    compared_engines,
    engine_abilities,
    engine_names,
    engines_with,
    load_engine,
    missing_ability,
    register_engine,
    require,
)
from hf_vanilla.translation.engines.ctranslate2_engine import CTranslate2Engine
from hf_vanilla.translation.engines.transformers_engine import TransformersEngine

DEFAULT_ENGINE = EngineSettings()


def model_engine(model, tokenizer) -> TranslationEngine:
    """The reference engine over a torch model already loaded (a plot's, a test's)."""
    return TransformersEngine(model, tokenizer)


__all__ = [
    "ATTENTION",
    "COMPUTE_TYPES",
    "DEFAULT_ENGINE",
    "LOGITS_PROCESSORS",
    "NBEST_SCORES",
    "SAMPLING",
    "VOCABULARY_MAP",
    "CTranslate2Engine",
    "EngineSettings",
    "TransformersEngine",
    "TranslationEngine",
    "compared_engines",
    "engine_abilities",
    "engine_names",
    "engines_with",
    "load_engine",
    "missing_ability",
    "model_engine",
    "register_engine",
    "require",
]
