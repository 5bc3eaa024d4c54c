"""The student benchmark on tiny models and a few sentences: the teacher and each student, with and
without the shortlist, offline and in the service, their BLEU, their ratios to the teacher, the CPU named,
the frontier plotted; a student without its shortlist refused in one line."""

import json
import shutil

import pytest
from conftest import DE_EN, run_script

from hf_vanilla.checkpoints.loading import load_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.translation.shortlist import VOCAB_MAP_FILE, build_shortlist, save_shortlist, tokenized_pairs

pytest.importorskip("ctranslate2")
SYSTEMS = ["teacher", "teacher + shortlist", "student 2-2", "student 2-2 + shortlist"]  # tiny: 2 layers each


@pytest.fixture(scope="module")
def student_dir(tiny_model_dir, tiny_dataset, tmp_path_factory):
    """A stand-in student: the tiny model with a shortlist of the tiny corpus."""
    directory = shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("student") / "student")
    pairs = load_translation_split(tiny_dataset, "de", "en", "train")
    tokenized = tokenized_pairs(load_tokenizer(directory), pairs["source"], pairs["target"])
    save_shortlist(build_shortlist(*tokenized), directory / VOCAB_MAP_FILE)
    return directory


def run_benchmark(teacher, students, dataset, output_dir, *flags):
    """The benchmark on 4 validation sentences, translations cut at 6 tokens."""
    return run_script(
        "tools/benchmark_student.py", "--teacher", teacher, "--student", *students,
        "--dataset", dataset, *DE_EN, "--split", "validation", "--first-pairs", "4",
        "--max-new-tokens", "6", "--repeats", "1", "--output", output_dir / "student.json",
        "--plot", output_dir / "frontier.png", "--log-level", "warning", *flags,
    )  # fmt: skip


def benchmark(teacher, students, dataset, output_dir, *flags):
    """The benchmark's report and frontier plot."""
    run = run_benchmark(teacher, students, dataset, output_dir, *flags)
    assert run.returncode == 0, run.stderr[-3000:]
    output, plot = output_dir / "student.json", output_dir / "frontier.png"
    assert plot.read_bytes().startswith(b"\x89PNG")
    return json.loads(output.read_text())


def test_the_report_holds_every_system_with_its_bleu_and_ratios(
    tiny_model_dir, student_dir, tiny_dataset, tmp_path
):
    report = benchmark(tiny_model_dir, [student_dir], tiny_dataset, tmp_path, "--offline-only")
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
    report = benchmark(tiny_model_dir, [student_dir], tiny_dataset, tmp_path, *flags)
    for system in report["systems"].values():
        assert system["service"]["requests"] == 4 and system["service"]["errors"] == 0
    assert report["ratios"]["teacher"]["service / teacher"] == 1.0


def test_two_students_of_one_shape_are_told_apart_by_their_work_directories(
    tiny_model_dir, student_dir, tiny_dataset, tmp_path
):
    twin = shutil.copytree(student_dir, tmp_path / "twin")
    report = benchmark(tiny_model_dir, [student_dir, twin], tiny_dataset, tmp_path, "--offline-only")
    names = [f"student 2-2 ({student_dir.parent.name})", "student 2-2 (twin)"]
    variants = [f"{name}{shortlist}" for name in names for shortlist in ("", " + shortlist")]
    assert list(report["systems"])[2:] == variants


def test_a_student_without_its_shortlist_is_refused_in_one_line(tiny_model_dir, tiny_dataset, tmp_path):
    run = run_benchmark(tiny_model_dir, [tiny_model_dir], tiny_dataset, tmp_path, "--offline-only")
    assert run.returncode == 1
    assert run.stderr.strip() == (
        f"error: {tiny_model_dir} has no {VOCAB_MAP_FILE}: give a student that make_student.py made"
    )
    assert not (tmp_path / "student.json").exists()
