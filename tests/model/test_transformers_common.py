"""transformers' own model tests (ModelTesterMixin, ConfigTester),
the ones every model inside the library passes.

They are not in the transformers wheel, so they are taken from the source distribution of the INSTALLED
version: downloaded once with pip into ~/.cache/hf_vanilla (HF_VANILLA_CACHE overrides), never copied into
this repository. The module is skipped, with the reason, only when pip cannot fetch that sdist.

transformers' generation tests (GenerationTesterMixin, tests/generation/test_utils.py) are not in the sdist
either: they run when HF_VANILLA_GENERATION_TESTS names a copy of that file (README, "Tests"), from the
release tag nearest the installed version, and are skipped with that reason otherwise.
"""

import importlib
import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
import types
import unittest
from pathlib import Path

import pytest
import transformers
from filelock import FileLock
from transformers.models.auto import modeling_auto

from hf_vanilla import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)
from hf_vanilla.files import atomic_file

CACHE = Path(os.environ.get("HF_VANILLA_CACHE", Path.home() / ".cache" / "hf_vanilla"))
GENERATION_TESTS = os.environ.get("HF_VANILLA_GENERATION_TESTS")
UPSTREAM_FILES = ("test_modeling_common.py", "test_configuration_common.py")
PACKAGE = "transformers_upstream_tests"  # the sdist's tests/ directory, imported under this name


def upstream_tests_directory(version: str = transformers.__version__) -> Path:
    """The sdist's tests/ files this module needs, downloaded and unpacked on first use."""
    directory = CACHE / f"transformers-{version}-tests"
    CACHE.mkdir(parents=True, exist_ok=True)
    # Every test worker collects this module: the first fetches, the others wait and find the files.
    with FileLock(directory.with_name(f"{directory.name}.lock")):
        if not all((directory / name).exists() for name in (*UPSTREAM_FILES, "__init__.py")):
            _fetch_upstream_tests(version, directory)
    return directory


def _fetch_upstream_tests(version: str, directory: Path) -> None:
    """Download the transformers `version` sdist with pip and unpack UPSTREAM_FILES into `directory`."""
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
        command += ["--retries", "1", "--timeout", "20", "--dest", download, f"transformers=={version}"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode:
            reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(
                f"pip cannot fetch the transformers {version} sdist: {reason}", allow_module_level=True
            )
        (archive,) = Path(download).glob("transformers-*.tar.gz")
        with tarfile.open(archive) as tar:
            for name in UPSTREAM_FILES:
                with atomic_file(directory / name) as staging:
                    staging.write_bytes(tar.extractfile(f"transformers-{version}/tests/{name}").read())
    # test_configuration_common runs direct_transformers_import on its own directory, which executes the
    # __init__.py of transformers' (empty) tests package; the sdist leaves that file out.
    (directory / "__init__.py").touch()


def stub_module(name: str, **attributes) -> None:
    """An importable module `name` (and its parent packages) holding `attributes`."""
    parent = name.rpartition(".")[0]
    if parent and parent not in sys.modules:
        stub_module(parent)
    module = types.ModuleType(name)
    module.__path__ = []
    module.__dict__.update(attributes)
    sys.modules[name] = module


def import_upstream_tests() -> tuple[types.ModuleType, types.ModuleType]:
    """test_modeling_common and test_configuration_common,
    with what they import from outside the sdist stubbed."""
    package = types.ModuleType(PACKAGE)
    package.__path__ = [str(upstream_tests_directory())]
    sys.modules[PACKAGE] = package
    # tests/exporters/ is not in the sdist: its mixins (torch.export tests) are empty classes here.
    exporters = {name: type(name, (), {}) for name in ("ExportTesterMixin", "ExportGenerateTesterMixin")}
    stub_module(f"{PACKAGE}.exporters.test_export", **exporters)
    # tests/generation/ is not in the sdist: the copy HF_VANILLA_GENERATION_TESTS names, or an
    # empty GenerationTesterMixin (ModelTesterMixin checks that a model that can generate has a
    # tester subclassing it).
    generation = f"{PACKAGE}.generation.test_utils"
    if GENERATION_TESTS:
        if not Path(GENERATION_TESTS).is_file():
            raise FileNotFoundError(f"HF_VANILLA_GENERATION_TESTS={GENERATION_TESTS} is not a file")
        stub_module("tests.exporters.test_export", **exporters)  # the generation tests import it by this name
        stub_module(f"{PACKAGE}.generation")
        spec = importlib.util.spec_from_file_location(generation, GENERATION_TESTS)
        sys.modules[generation] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[generation])
    else:
        stub_module(generation, GenerationTesterMixin=type("GenerationTesterMixin", (), {}))
    # tests/utils/ is not in the sdist either: ConfigTester checks that the base config keeps these
    # arguments (the dict of transformers 5.x tests/utils/test_configuration_utils.py).
    config_common_kwargs = {
        "return_dict": False,
        "output_hidden_states": True,
        "output_attentions": True,
        "dtype": "float16",
        "chunk_size_feed_forward": 5,
        "architectures": ["BertModel"],
        "id2label": {0: "label"},
        "label2id": {"label": "0"},
        "problem_type": "regression",
    }
    stub_module(f"{PACKAGE}.utils.test_configuration_utils", config_common_kwargs=config_common_kwargs)
    return (
        importlib.import_module(f"{PACKAGE}.test_modeling_common"),
        importlib.import_module(f"{PACKAGE}.test_configuration_common"),
    )


modeling_common, configuration_common = import_upstream_tests()


@pytest.fixture(scope="module", autouse=True)
def listed_like_a_library_model():
    """Our classes in transformers' Auto name tables, where the mixin looks a model up (as it does Marian's):
    it then builds labels for the LM class and skips the loss-less base model in the training tests."""
    with pytest.MonkeyPatch.context() as patch:
        model_type = VanillaTransformerConfig.model_type
        patch.setitem(modeling_auto.MODEL_MAPPING_NAMES, model_type, VanillaTransformerModel.__name__)
        patch.setitem(
            modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
            model_type,
            VanillaTransformerForConditionalGeneration.__name__,
        )
        yield


class VanillaTransformerModelTester:
    """The tiny config and inputs the mixin tests run on: the shapes of transformers' Marian tester."""

    def __init__(self, parent, config_class=VanillaTransformerConfig, **config_fields):
        self.parent = parent
        self.config_class = config_class
        self.batch_size = 13
        self.seq_length = 7
        self.is_training = True
        self.vocab_size = 99
        self.hidden_size = 16
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.config_fields = {
            "vocab_size": self.vocab_size,
            "d_model": self.hidden_size,
            "d_ff": 4,
            "num_attention_heads": self.num_attention_heads,
            "encoder_layers": self.num_hidden_layers,
            "decoder_layers": self.num_hidden_layers,
            "dropout": 0.1,
            "attention_dropout": 0.1,
            "max_position_embeddings": 100,
            **config_fields,
        }

    def get_config(self):
        return self.config_class(**self.config_fields)

    def prepare_config_and_inputs_for_common(self):
        config = self.get_config()
        input_ids = modeling_common.ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        input_ids[:, -1] = config.eos_token_id
        # No padding id inside a target, as in a real batch: the generation test that continues from
        # a returned cache hands back a mask one shorter than the decoder ids, which a padded
        # position inside would shift.
        decoder_input_ids = modeling_common.ids_tensor(
            [self.batch_size, self.seq_length], self.vocab_size
        ).clamp(3)
        attention_mask = input_ids.ne(config.pad_token_id)
        inputs = {
            "input_ids": input_ids,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": attention_mask,
            "decoder_attention_mask": decoder_input_ids.ne(config.pad_token_id),
        }
        return config, inputs


class VanillaTransformerModelTest(
    modeling_common.ModelTesterMixin,
    sys.modules[f"{PACKAGE}.generation.test_utils"].GenerationTesterMixin,
    unittest.TestCase,
):
    all_model_classes = (VanillaTransformerModel, VanillaTransformerForConditionalGeneration)
    is_encoder_decoder = True

    def setUp(self):
        self.model_tester = VanillaTransformerModelTester(self)
        self.config_tester = configuration_common.ConfigTester(self, config_class=VanillaTransformerConfig)

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_transformers_generation_tests_are_included(self):
        """With HF_VANILLA_GENERATION_TESTS, this class runs every test of transformers'
        GenerationTesterMixin; without it, the skip says they did not run."""
        if not GENERATION_TESTS:
            self.skipTest(
                "transformers' GenerationTesterMixin did not run: "
                "set HF_VANILLA_GENERATION_TESTS to a copy of "
                "transformers' tests/generation/test_utils.py (docs/testing.md)"
            )
        mixin = sys.modules[f"{PACKAGE}.generation.test_utils"].GenerationTesterMixin
        generation_tests = [name for name in vars(mixin) if name.startswith("test_")]
        assert generation_tests and all(callable(getattr(self, name)) for name in generation_tests)
