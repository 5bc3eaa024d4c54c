import json

import pytest
import sacrebleu
from conftest import DE_EN, run_script, tiny_config
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.evaluation.scoring import Runtime, TranslationData
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.research.distillation import PROVENANCE_FILE, SavedTranslations, Teachers, distill_dataset
from hf_vanilla.training.train import train
from hf_vanilla.translation.decoding import translate_sentences
from hf_vanilla.translation.engines import TransformersEngine

TRANSLATE = TransformersEngine.translate  # the engine's own, which the counting stand-in calls
GREEDY = {"num_beams": 1, "max_new_tokens": 8}  # untrained teachers: short outputs keep the tests quick
OPTIONS = DecodingOptions(**GREEDY)
QUIET = Runtime(show_progress=False)


def pairs_of(dataset, source_lang="de", target_lang="en"):
    return TranslationData(dataset, source_lang, target_lang)


@pytest.fixture(scope="module")
def teacher(tiny_model_dir):
    return AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(
        tiny_model_dir
    )


@pytest.fixture(scope="module")
def original(tiny_dataset):
    return load_translation_split(tiny_dataset, "de", "en", "train").to_dict()


@pytest.fixture(scope="module")
def distilled(tiny_model_dir, tiny_dataset, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("distilled") / "de-en"
    provenance = distill_dataset(
        pairs_of(tiny_dataset), output_dir, Teachers([tiny_model_dir]), QUIET, options=OPTIONS
    )
    return output_dir, provenance


def translated(teacher, sentences):
    return translate_sentences(*teacher, sentences, batching=QUIET.batching, options=OPTIONS)


def test_forward_targets_are_the_teachers_translations_of_the_sources_in_order(teacher, original, distilled):
    output_dir, provenance = distilled
    written = load_translation_split(str(output_dir), "de", "en", "train").to_dict()
    assert written["source"] == original["source"]
    assert written["target"] == translated(teacher, original["source"])
    assert written["target"] != original["target"]
    assert provenance["rows"] == {"train": 400, "validation": 16}
    assert json.loads((output_dir / PROVENANCE_FILE).read_text()) == provenance
    assert provenance["generate_kwargs"] == GREEDY and provenance["teachers"][0]["side"] == "forward"


def test_other_splits_are_copied_unchanged(tiny_dataset, distilled):
    output_dir, _ = distilled
    written = load_translation_split(str(output_dir), "de", "en", "validation")
    assert written.to_dict() == load_translation_split(tiny_dataset, "de", "en", "validation").to_dict()


def test_diversified_data_is_the_original_then_forward_then_backward_pairs(
    teacher, original, tiny_model_dir, tiny_dataset, tmp_path
):
    provenance = distill_dataset(
        pairs_of(tiny_dataset),
        tmp_path / "diversified",
        Teachers(forward=[tiny_model_dir], backward=[tiny_model_dir], keep_original=True),
        QUIET,
        options=OPTIONS,
    )
    written = load_translation_split(str(tmp_path / "diversified"), "de", "en", "train").to_dict()
    assert written["source"] == original["source"] * 2 + translated(teacher, original["target"])
    assert (
        written["target"] == original["target"] + translated(teacher, original["source"]) + original["target"]
    )
    assert provenance["rows"]["train"] == 1200
    assert [teacher["side"] for teacher in provenance["teachers"]] == ["forward", "backward"]


def test_a_student_trains_on_the_distilled_dataset(distilled, tokenizer_dir, tmp_path):
    run = train(tiny_config(str(distilled[0]), tokenizer_dir, tmp_path / "student", max_steps=4))
    assert (run / "checkpoint_4").is_dir() and (run / "checkpoint_last").is_dir()


def test_a_directory_that_is_not_empty_is_refused_and_kept(tiny_model_dir, tiny_dataset, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    teachers = Teachers([tiny_model_dir])
    with pytest.raises(FileExistsError, match="out exists and is not empty; pass --overwrite"):
        distill_dataset(pairs_of(tiny_dataset), tmp_path / "out", teachers, QUIET, options=OPTIONS)
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["notes.txt"]
    distill_dataset(
        pairs_of(tiny_dataset), tmp_path / "out", teachers, QUIET, overwrite=True, options=OPTIONS
    )
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        PROVENANCE_FILE,
        "train.jsonl",
        "validation.jsonl",
    ]


def test_no_teacher_is_refused(tiny_dataset, tmp_path):
    with pytest.raises(ValueError, match="no teacher: name at least one forward or backward model"):
        distill_dataset(pairs_of(tiny_dataset), tmp_path / "out", Teachers())
    assert not (tmp_path / "out").exists()


def test_a_model_that_does_not_load_is_named_before_any_decoding(
    tiny_model_dir, tiny_dataset, tmp_path, monkeypatch
):
    monkeypatch.setattr(TransformersEngine, "translate", lambda *args, **kwargs: pytest.fail("decoded"))
    with pytest.raises(FileNotFoundError, match="cannot load a model and tokenizer from '.*no-such-model'"):
        distill_dataset(
            pairs_of(tiny_dataset),
            tmp_path / "out",
            Teachers(forward=[tiny_model_dir], backward=[tmp_path / "no-such-model"]),
        )
    assert not (tmp_path / "out").exists()


def test_each_models_bleu_against_the_training_references_is_recorded(original, distilled):
    (forward,) = distilled[1]["teachers"]
    assert forward["train_bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(
            load_translation_split(str(distilled[0]), "de", "en", "train")["target"], [original["target"]]
        ).score
    )


class CountingTranslations:
    """The engine's translate, counting the sentences it decodes; raising once `fail_after` calls have run."""

    def __init__(self, fail_after=None):
        self.sentences, self.calls, self.fail_after = 0, 0, fail_after

    def __call__(self, engine, sentences, options, batching):
        if self.calls == self.fail_after:
            raise RuntimeError("out of memory")
        self.calls += 1
        self.sentences += len(sentences)
        return TRANSLATE(engine, sentences, options, batching)


def count_translations(monkeypatch, counting: CountingTranslations) -> None:
    def translate(engine, sentences, options, batching):
        return counting(engine, sentences, options, batching)

    monkeypatch.setattr(TransformersEngine, "translate", translate)


def test_a_teacher_that_fails_leaves_no_directory_and_a_second_try_goes_on_where_it_stopped(
    tiny_model_dir, tiny_dataset, tmp_path, monkeypatch
):
    def distill(output_dir):
        teachers, saved = Teachers([tiny_model_dir]), SavedTranslations(chunk_size=150)
        distill_dataset(pairs_of(tiny_dataset), output_dir, teachers, QUIET, saved, options=OPTIONS)

    failing = CountingTranslations(fail_after=2)
    count_translations(monkeypatch, failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        distill(tmp_path / "out")
    assert not (tmp_path / "out").exists() and failing.sentences == 300  # two of the three chunks saved

    again = CountingTranslations()
    count_translations(monkeypatch, again)
    distill(tmp_path / "out")
    assert again.sentences == 100 and again.calls == 1  # only the last chunk decoded
    assert [path.name for path in tmp_path.iterdir()] == ["out"]  # its own translations removed once written
    distill(tmp_path / "whole")  # no stop, nothing saved before
    assert again.sentences == 100 + 400
    read = load_translation_split(str(tmp_path / "out"), "de", "en", "train").to_dict()
    assert read == load_translation_split(str(tmp_path / "whole"), "de", "en", "train").to_dict()


def test_the_other_directions_diversification_reads_the_translations_it_shares(
    tiny_model_dir, tiny_dataset, tmp_path, monkeypatch
):
    counting = CountingTranslations()
    count_translations(monkeypatch, counting)
    saved = SavedTranslations(tmp_path / "translations")
    forward = Teachers(forward=[tiny_model_dir])
    distill_dataset(pairs_of(tiny_dataset), tmp_path / "de-en", forward, QUIET, saved, options=OPTIONS)
    # en->de's backward model translates the German side, as de->en's forward model did: nothing to decode
    backward = Teachers(backward=[tiny_model_dir])
    distill_dataset(
        pairs_of(tiny_dataset, "en", "de"), tmp_path / "en-de", backward, QUIET, saved, options=OPTIONS
    )
    assert counting.sentences == 400 and (tmp_path / "translations").is_dir()
    de_en = load_translation_split(str(tmp_path / "de-en"), "de", "en", "train").to_dict()
    en_de = load_translation_split(str(tmp_path / "en-de"), "en", "de", "train").to_dict()
    assert en_de == {"source": de_en["target"], "target": de_en["source"]}
    # other settings are other translations
    distill_dataset(
        pairs_of(tiny_dataset),
        tmp_path / "beam-2",
        forward,
        QUIET,
        saved,
        options=OPTIONS.replace(num_beams=2),
    )
    assert counting.sentences == 800


def test_damaged_saved_translations_are_named(tiny_model_dir, tiny_dataset, tmp_path):
    options = (Teachers([tiny_model_dir]), QUIET, SavedTranslations(tmp_path / "saved"))
    distill_dataset(pairs_of(tiny_dataset), tmp_path / "out", *options, options=OPTIONS)
    (translations,) = (tmp_path / "saved").glob("*.txt")
    translations.write_text("cut short\n")
    with pytest.raises(ValueError, match=rf"{translations.name} holds 1 translations, not 400: remove it"):
        distill_dataset(pairs_of(tiny_dataset), tmp_path / "again", *options, options=OPTIONS)
    assert not (tmp_path / "again").exists()


def test_translations_saved_by_an_earlier_version_are_named_in_one_line(
    tiny_model_dir, tiny_dataset, tmp_path
):
    options = (Teachers([tiny_model_dir]), QUIET, SavedTranslations(tmp_path / "saved"))
    distill_dataset(pairs_of(tiny_dataset), tmp_path / "out", *options, options=OPTIONS)
    (translations,) = (tmp_path / "saved").glob("*.txt")
    translations.unlink()
    (tmp_path / "saved" / translations.stem).mkdir()  # the earlier layout: a directory of chunk-NNNNN.txt
    with pytest.raises(
        ValueError, match=rf"{translations.stem} holds translations saved by an earlier version: "
    ):
        distill_dataset(pairs_of(tiny_dataset), tmp_path / "again", *options, options=OPTIONS)

def test_a_training_sentence_with_a_line_break_is_named_before_any_decoding(
    tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setattr(TransformersEngine, "translate", lambda *args, **kwargs: pytest.fail("decoded"))
    rows = [{"translation": {"de": source, "en": "a cat"}} for source in ("eine katze", "zwei\nkatzen")]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(
        ValueError, match="training sentence 2 holds a line break: make each sentence one line"
    ):
        distill_dataset(pairs_of(str(tmp_path / "data")), tmp_path / "out", Teachers([tiny_model_dir]), QUIET)
    assert not (tmp_path / "out").exists()


def run_distill_script(model_dir, dataset, output_dir, *options):
    return run_script(
        "research/distill.py", "--forward", model_dir, "--dataset", dataset, *DE_EN,
        "--output-dir", output_dir, "--device", "cpu", *options,
    )  # fmt: skip


@pytest.mark.parametrize(
    "options, message",
    [
        (["--source-lang", "fr"], "Language 'fr' not in dataset"),
        (["--train-split", "training"], "Split 'training' not in dataset"),
    ],
)
def test_script_names_bad_input_in_one_line_and_writes_nothing(
    tiny_model_dir, tiny_dataset, tmp_path, options, message
):
    result = run_distill_script(tiny_model_dir, tiny_dataset, tmp_path / "out", *options)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {message}")
    assert not (tmp_path / "out").exists()


def test_script_writes_the_dataset_and_says_how_many_pairs(tiny_model_dir, tiny_dataset, tmp_path):
    options = ["--backward", tiny_model_dir, "--num-beams", "1", "--max-new-tokens", "4", "--keep-original"]
    options += ["--translations-dir", tmp_path / "saved"]
    result = run_distill_script(tiny_model_dir, tiny_dataset, tmp_path / "out", *options)
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "saved").glob("*.txt"))) == 2  # the sources, the targets
    assert f"wrote {tmp_path / 'out'}: 1200 training pairs; forward {tiny_model_dir} (" in result.stdout
    assert json.loads((tmp_path / "out" / PROVENANCE_FILE).read_text())["keep_original"] is True
