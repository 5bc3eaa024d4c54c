"""The model a checkpoint carries: these files import only torch, transformers, huggingface_hub and each
other."""
