"""What the service's tests share: the served model, the offline translation they compare with, and a real
server process (scripts/serve.py) with the clients' side of the tests.

tests/serving is a package, so that this conftest does not take the name `conftest`, by which test modules
everywhere import tests/conftest.py.
"""

import time
from pathlib import Path

import pytest
import requests
from _server_process import ServerProcess
from conftest import sharpened
from huggingface_hub import ModelCard, ModelCardData
from transformers import AutoModelForSeq2SeqLM

from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.translation.decoding import QUIET, translate_sentences

STARTUP_SECONDS = 180  # two processes importing torch at once on a busy 2-core machine (20 s when idle)
BEAM = {"num_beams": 4, "length_penalty": 0.6}  # what the model's generation_config.json says


class Server(ServerProcess):
    """scripts/serve.py in its own process, with the clients' side of the tests."""

    def __init__(self, model_dir: Path, log: Path, *flags: str):
        super().__init__(model_dir, log, ("--device", "cpu", *flags))

    def stats(self) -> dict[str, int]:
        return requests.get(f"{self.url}/stats", timeout=5).json()

    def wait_for_queued(self, sentences: int) -> None:
        deadline = time.monotonic() + 10
        while self.stats()["queued"] != sentences:
            assert time.monotonic() < deadline, f"never {sentences} sentences queued: {self.stats()}"
            time.sleep(0.05)

    def translate(self, inputs, timeout=30, **generate_parameters) -> requests.Response:
        payload = {"inputs": inputs, "parameters": {"generate_parameters": generate_parameters}}
        return requests.post(self.url, json=payload, timeout=timeout)

    def attention(self, text, heads=False, timeout=30, **generate_parameters) -> requests.Response:
        payload = {"inputs": text, "parameters": {"generate_parameters": generate_parameters, "heads": heads}}
        return requests.post(f"{self.url}/attention", json=payload, timeout=timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def served_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model sharpened, saved with its tokenizer and a generation config of beam 4, penalty 0.6.

    Sharpened, as a trained model's outputs are peaked: beam search then has clear winners, and a batch of
    another shape cannot flip one by float rounding, so answers are compared exactly."""
    directory = tmp_path_factory.mktemp("served")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_bytes((tiny_model_dir / name).read_bytes())
    model = sharpened(AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir))
    model.generation_config.num_beams, model.generation_config.length_penalty = BEAM.values()
    model.save_pretrained(directory)
    ModelCard.from_template(ModelCardData(language=["de", "en"])).save(directory / "README.md")
    return directory


@pytest.fixture(scope="session")
def offline(served_model_dir):
    """The same model loaded in this process, for `translate_sentences`' answers."""
    model, tokenizer = load_model_and_tokenizer(served_model_dir, "cpu")

    def translate(sources, **settings):
        return translate_sentences(model, tokenizer, sources, batching=QUIET, **settings)

    return translate
