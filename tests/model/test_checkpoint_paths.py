"""A trained checkpoint stays whole wherever transformers takes it: saved again by transformers' own
`save_pretrained`, pushed with `push_to_hub`, run through the pipeline with the package imported, decoded by a
plain `generate`, exported to MarianMT; its card and its training log say what a reader needs. The user's
paths run in a fresh process, importing hf_vanilla only where the user's would."""

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, tiny_config
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from hf_vanilla.checkpoints.cards import RunRecord, directory_card
from hf_vanilla.tools.export import export_to_marian
from hf_vanilla.training.train import train

RESAVE = """
import json, sys
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
checkpoint, directory = sys.argv[1:]
AutoModelForSeq2SeqLM.from_pretrained(checkpoint, trust_remote_code=True).save_pretrained(directory)
AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True).save_pretrained(directory)
print(json.dumps({"imported_hf_vanilla": any(name.split(".")[0] == "hf_vanilla" for name in sys.modules)}))
"""

TRANSLATE = """
import json, sys
from transformers import pipeline
sources, translations = json.loads(sys.argv[1]), {}
for directory in sys.argv[2:]:
    translator = pipeline("vanilla-translation", model=directory, trust_remote_code=True, device="cpu")
    translations[directory] = [result["translation_text"] for result in translator(sources)]
print(json.dumps({
    "translations": translations,
    "imported_hf_vanilla": any(name.split(".")[0] == "hf_vanilla" for name in sys.modules),
}))
"""

# The Hub, recorded: create_repo and create_commit (all push_to_hub calls) keep what would be uploaded, and a
# README.md committed before is what the next push reads back as the repo's card.
PUSH = """
import json, sys, types
import huggingface_hub, huggingface_hub.repocard
from huggingface_hub.errors import EntryNotFoundError
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
checkpoint, repo_id, card_copy = sys.argv[1:]
hub = {}

def create_repo(self, repo_id, **kwargs):
    return types.SimpleNamespace(repo_id=repo_id)

def create_commit(self, repo_id, operations, **kwargs):
    for operation in operations:
        with open(operation.path_or_fileobj, "rb") as file:
            hub[operation.path_in_repo] = file.read()

def hf_hub_download(repo_id, filename, **kwargs):
    if filename not in hub:
        raise EntryNotFoundError(f"{filename} is not in {repo_id}")
    with open(card_copy, "wb") as file:
        file.write(hub[filename])
    return card_copy

huggingface_hub.HfApi.create_repo = create_repo
huggingface_hub.HfApi.create_commit = create_commit
huggingface_hub.repocard.hf_hub_download = hf_hub_download
AutoModelForSeq2SeqLM.from_pretrained(checkpoint, trust_remote_code=True).push_to_hub(repo_id)
AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True).push_to_hub(repo_id)
print(json.dumps({"files": sorted(hub), "card": hub["README.md"].decode()}))
"""

INSTALLED_PIPELINE = """
import json, sys
import hf_vanilla
from transformers import pipeline
directory, sources = sys.argv[1], json.loads(sys.argv[2])
translator = pipeline("vanilla-translation", model=directory, device="cpu")
print(json.dumps({
    "pipeline_module": type(translator).__module__,
    "translations": [result["translation_text"] for result in translator(sources)],
}))
"""

PLAIN_GENERATE = """
import json, sys, warnings
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
directory, source = sys.argv[1:]
model = AutoModelForSeq2SeqLM.from_pretrained(directory, trust_remote_code=True)
batch = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)([source], return_tensors="pt")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    output = model.generate(**batch)
    # The README's call sets its own limit: no second limit to warn of.
    model.generate(**batch, max_new_tokens=3)
print(json.dumps({"length": output.shape[-1], "warnings": [str(warning.message) for warning in caught]}))
"""

SOURCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]


def run_fresh(script, *args, cwd):
    """`script` in a new interpreter started in `cwd` (outside the repository, hf_vanilla cannot be imported);
    its last line of output parsed as JSON."""
    finished = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "[y/N]" not in finished.stdout + finished.stderr  # no prompt to run custom code
    assert "max_length" not in finished.stderr  # generate's warnings of a default or a second output limit
    return json.loads(finished.stdout.strip().splitlines()[-1])


@pytest.fixture
def elsewhere(tmp_path_factory):
    return tmp_path_factory.mktemp("elsewhere")


def test_a_checkpoint_saved_again_by_transformers_runs_the_pipeline(trained_run, tmp_path, elsewhere):
    checkpoint, resaved = trained_run / "checkpoint_last", tmp_path / "resaved"
    assert run_fresh(RESAVE, checkpoint, resaved, cwd=elsewhere)["imported_hf_vanilla"] is False
    model_code = {"modeling_vanilla.py", "attention_kernels.py", "hub.py", "configuration_vanilla.py"}
    assert {"pipeline.py", "decoding.py", *model_code} <= {path.name for path in resaved.iterdir()}
    assert ModelCard.load(resaved / "README.md").data.language == ["de", "en"]
    translated = run_fresh(TRANSLATE, json.dumps(SOURCES), checkpoint, resaved, cwd=elsewhere)
    assert translated["imported_hf_vanilla"] is False
    assert translated["translations"][str(resaved)] == translated["translations"][str(checkpoint)]


def test_push_to_hub_uploads_the_pipeline_code_and_the_checkpoints_card(trained_run, tmp_path, elsewhere):
    checkpoint = trained_run / "checkpoint_30"
    pushed = run_fresh(PUSH, checkpoint, "someone/hf-vanilla-de-en", tmp_path / "card.md", cwd=elsewhere)
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "configuration_vanilla.py",
        "modeling_vanilla.py",
        "attention_kernels.py",
        "hub.py",
        "pipeline.py",
        "decoding.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
    } <= set(pushed["files"])
    card, saved_card = ModelCard(pushed["card"]), ModelCard.load(checkpoint / "README.md")
    assert card.data.to_dict() == saved_card.data.to_dict()
    assert card.data.pipeline_tag == "translation" and card.data.license == "apache-2.0"
    assert card.data.eval_results and card.text == saved_card.text


def test_the_installed_pipeline_runs_a_trained_checkpoint_without_trust_remote_code(trained_run, elsewhere):
    checkpoint = trained_run / "checkpoint_last"
    # As installed: importable.
    installed = run_fresh(INSTALLED_PIPELINE, checkpoint, json.dumps(SOURCES), cwd=REPO)
    remote = run_fresh(TRANSLATE, json.dumps(SOURCES), checkpoint, cwd=elsewhere)
    assert installed["pipeline_module"] == "hf_vanilla.model.pipeline"
    assert installed["translations"] == remote["translations"][str(checkpoint)]



def test_plain_generate_runs_to_the_decoders_positions_not_to_transformers_default_20_tokens(
    trained_run, tmp_path, elsewhere
):
    """A model that never ends a sentence (its end token taken from the checkpoint's configs) shows
    the limit a plain `generate` works to: the checkpoint's, the decoder's positions, not
    transformers' default of 20."""
    never_ending = shutil.copytree(trained_run / "checkpoint_last", tmp_path / "never_ending")
    for name in ("config.json", "generation_config.json"):
        config = json.loads((never_ending / name).read_text())
        (never_ending / name).write_text(json.dumps({**config, "eos_token_id": None}))
    generated = run_fresh(PLAIN_GENERATE, never_ending, SOURCES[1], cwd=elsewhere)
    positions = json.loads((never_ending / "config.json").read_text())["max_position_embeddings"]
    assert generated == {"length": positions, "warnings": []}


def test_a_card_names_a_local_dataset_by_its_folder_and_a_hub_dataset_by_its_id(trained_run, tiny_dataset):
    card = ModelCard.load(trained_run / "checkpoint_last" / "README.md")
    assert str(Path(tiny_dataset).parent) not in str(card)
    assert f"on a local copy of {Path(tiny_dataset).name}." in card.text and card.data.datasets is None
    run = RunRecord("de", "en", "bentrevett/multi30k", "Trained.", validation={"val_bleu": 1.0})
    hub_card = directory_card(trained_run / "checkpoint_last", run)
    assert "on bentrevett/multi30k." in hub_card.text and hub_card.data.datasets == ["bentrevett/multi30k"]


def test_training_logs_the_distributed_setup_at_its_start(tiny_dataset, tokenizer_dir, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="hf_vanilla.training.train"):
        train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path, max_steps=1, save_interval_updates=None))
    setup = [record.getMessage() for record in caplog.records if "accelerate " in record.getMessage()]
    assert len(setup) == 1
    assert "Precision float32 on cpu" in setup[0]
    assert "accelerate NO, 1 process(es), mixed precision no" in setup[0]


def test_the_marian_export_names_a_tokenizer_class_transformers_4_and_5_load(trained_run, tmp_path):
    exported = export_to_marian(trained_run / "checkpoint_last", tmp_path / "marian")
    saved = json.loads((exported / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "PreTrainedTokenizerFast"
    loaded = AutoTokenizer.from_pretrained(exported)
    assert loaded.get_vocab() == AutoTokenizer.from_pretrained(trained_run / "checkpoint_last").get_vocab()
