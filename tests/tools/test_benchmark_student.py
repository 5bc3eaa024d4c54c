"""The student benchmark on tiny models and a few sentences: the four systems, offline and in the service,
their BLEU, their ratios to the teacher, the CPU named, the frontier plotted."""

import json
import shutil

import pytest
from conftest import DE_EN, run_script

from hf_vanilla.checkpoints.loading import load_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.translation.shortlist import VOCAB_MAP_FILE, build_shortlist, save_shortlist, tokenized_pairs

pytest.importorskip("ctranslate2")
SYSTEMS = ["teacher", "teacher + shortlist", "student", "student + shortlist"]


@pytest.fixture(scope="module")
def student_dir(tiny_model_dir, tiny_dataset, tmp_path_factory):
    """A stand-in student: the tiny model with a shortlist of the tiny corpus."""
    directory = shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("student") / "student")
    pairs = load_translation_split(tiny_dataset, "de", "en", "train")
    tokenized = tokenized_pairs(load_tokenizer(directory), pairs["source"], pairs["target"])
    save_shortlist(build_shortlist(*tokenized), directory / VOCAB_MAP_FILE)
    return directory


def benchmark(teacher, student, dataset, output_dir, *flags):
    """The benchmark's report and frontier plot on 4 validation sentences, translations cut at 6 tokens."""
    output, plot = output_dir / "student.json", output_dir / "frontier.png"
    run = run_script(
        "tools/benchmark_student.py", "--teacher", teacher, "--student", student,
        "--dataset", dataset, *DE_EN, "--split", "validation", "--first-pairs", "4",
        "--max-new-tokens", "6", "--repeats", "1",
        "--output", output, "--plot", plot, "--log-level", "warning", *flags,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert plot.read_bytes().startswith(b"\x89PNG")
    return json.loads(output.read_text())


def test_the_report_holds_every_system_with_its_bleu_and_ratios(
    tiny_model_dir, student_dir, tiny_dataset, tmp_path
):
    report = benchmark(tiny_model_dir, student_dir, tiny_dataset, tmp_path, "--offline-only")
    assert report["cpu"] and report["compute_type"] == "int8" and report["threads"] == 1
    assert list(report["systems"]) == SYSTEMS == list(report["ratios"])
    for name, system in report["systems"].items():
        assert system["vocab_map"] == name.endswith("shortlist")
        assert system["offline"]["sentences"] == 4 and system["offline"]["sentences_per_second"] > 0
        assert 0 <= system["bleu"] <= 100 and "service" not in system
    assert report["ratios"]["teacher"] == {"offline / teacher": 1.0, "bleu - teacher": 0}


@pytest.mark.slow
def test_each_system_is_served_too(tiny_model_dir, student_dir, tiny_dataset, tmp_path):
    flags = ("--clients", "2", "--requests", "4")
    report = benchmark(tiny_model_dir, student_dir, tiny_dataset, tmp_path, *flags)
    for system in report["systems"].values():
        assert system["service"]["requests"] == 4 and system["service"]["errors"] == 0
    assert report["ratios"]["teacher"]["service / teacher"] == 1.0
