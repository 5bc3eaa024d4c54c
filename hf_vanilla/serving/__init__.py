"""A translation service over one saved model (`scripts/serve.py`): the Hugging Face Inference API's
translation task on FastAPI, requests batched on the fly. Needs `pip install 'hf_vanilla[serve]'`; nothing in
the core imports it."""

from hf_vanilla.serving.app import RequestLimits, create_app
from hf_vanilla.serving.policy import BatchingSettings

__all__ = ["BatchingSettings", "RequestLimits", "create_app"]
