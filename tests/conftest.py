import os
from itertools import chain
from pathlib import Path

import pytest
import torch

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.data import load_translation_split
from hf_vanilla.tokenization import config_kwargs_from_tokenizer, save_tokenizer, train_tokenizer

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
MULTI30K = Path(os.environ.get("HF_VANILLA_MULTI30K", REPO.parent / "shared" / "datasets" / "multi30k"))


@pytest.fixture(scope="session")
def multi30k_path() -> str:
    """The local Multi30k copy in the Hub `translation` layout (never copied into the repo)."""
    if not (MULTI30K / "train.jsonl").exists():
        pytest.fail(f"Multi30k not found at {MULTI30K}; set HF_VANILLA_MULTI30K")
    return str(MULTI30K)


def pytest_configure(config):
    """The marks transformers' own tests (test_transformers_common.py) use, which its conftest.py declares."""
    for mark in ("slow", "accelerate_tests", "torch_compile_test", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test"):
        config.addinivalue_line("markers", f"{mark}: a mark of transformers' model tests")


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models gain nothing from a second thread, and on a busy 2-core machine two threads crawl
    (measured: test_training.py took 28 s with one thread, over 2 minutes with two, under the same load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_model_dir(multi30k_path, tmp_path_factory) -> Path:
    """An untrained tiny model and a 1,000-token BPE from 2,000 Multi30k pairs, saved together."""
    directory = tmp_path_factory.mktemp("tiny_model")
    pairs = load_translation_split(multi30k_path, "de", "en", "train").select(range(2000))
    tokenizer = train_tokenizer(chain(pairs["source"], pairs["target"]), vocab_size=1000, show_progress=False)
    torch.manual_seed(0)
    config = VanillaTransformerConfig.from_preset("tiny", **config_kwargs_from_tokenizer(tokenizer))
    save_tokenizer(tokenizer, directory)  # first: it replaces the whole directory
    VanillaTransformerForConditionalGeneration(config).save_pretrained(directory)
    return directory
