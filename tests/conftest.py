import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
MULTI30K = Path(os.environ.get("HF_VANILLA_MULTI30K", REPO.parent / "shared" / "datasets" / "multi30k"))


@pytest.fixture(scope="session")
def multi30k_path() -> str:
    """The local Multi30k copy in the Hub `translation` layout (never copied into the repo)."""
    if not (MULTI30K / "train.jsonl").exists():
        pytest.fail(f"Multi30k not found at {MULTI30K}; set HF_VANILLA_MULTI30K")
    return str(MULTI30K)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
