"""Translating a corpus a chunk at a time: one line in, one line out, in order; a stopped run resumed gives
the uninterrupted run's file byte for byte, a changed one is refused; processes share the chunks; n-best, JSON
lines and seeded sampling."""

import bz2
import contextlib
import dataclasses
import gzip
import importlib.util
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import SCRIPTS, run_in_session, run_script
from synthetic_corpus import synthetic_pairs
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_vanilla.checkpoints.loading import model_digest
from hf_vanilla.data.corpus import CorpusError
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.translation import corpus as corpus_translation
from hf_vanilla.translation.corpus import (
    CorpusJob,
    CorpusSettings,
    CorpusTranslationError,
    engine_translator,
    translate_corpus,
)
from hf_vanilla.translation.engines import TransformersEngine

GREEDY = DecodingOptions(num_beams=1, max_new_tokens=4)
SAMPLING = GREEDY.replace(do_sample=True, top_k=0)
SOURCES = [german for german, _ in synthetic_pairs(11)]
LONG_LINE = " ".join(["Hund"] * 1100)  # longer than the tiny model's 1024 positions
PROVENANCE = {"model": "digest of the model", "decoding": "the options"}
COMPRESSIONS = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}
if importlib.util.find_spec("zstandard"):
    COMPRESSIONS[".zst"] = importlib.import_module("zstandard").compress


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir).eval()
    return TransformersEngine(model, AutoTokenizer.from_pretrained(tiny_model_dir))


def write_input(path, lines: list[bytes]):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def translated(engine, tmp_path, options=GREEDY, name="output.en", **settings) -> bytes:
    """The output of translating SOURCES from a file into `name` under `tmp_path`."""
    source = write_input(tmp_path / "input.de", [line.encode() for line in SOURCES])
    corpus = CorpusSettings(**{"chunk_lines": 3, **settings})
    job = CorpusJob(str(source), str(tmp_path / name), corpus, PROVENANCE)
    translate_corpus(engine_translator(engine, options, corpus), job, show_progress=False)
    return (tmp_path / name).read_bytes()


class Stop:
    """Calls `translate` `chunks` times, then stops as Ctrl-C (or SIGTERM, in translate.py) does."""

    def __init__(self, translate, chunks: int):
        self.translate, self.chunks = translate, chunks

    def __call__(self, *args):
        if self.chunks == 0:
            raise KeyboardInterrupt
        self.chunks -= 1
        return self.translate(*args)


def mirror(sources):
    """A chunk translator whose translation of a line shows which line it was: the line backwards."""
    return [[(source[::-1], None)] for source in sources]


def test_every_line_comes_out_in_order_blank_and_not_utf8_ones_included(tmp_path, caplog):
    lines = [
        b"Ein Hund.",
        b"",
        b"Zwei Katzen.\r",
        b"Ein \xff Hund.",
        b"  ",
        *(line.encode() for line in SOURCES),
    ]
    source = write_input(tmp_path / "input.de", lines)
    job = CorpusJob(str(source), str(tmp_path / "output.en"), CorpusSettings(chunk_lines=2, errors="replace"))
    with caplog.at_level("WARNING"):
        translate_corpus(mirror, job, show_progress=False)
    texts = [line.removesuffix(b"\r").decode("utf-8", "replace") for line in lines]
    assert (tmp_path / "output.en").read_text().split("\n") == [*(text[::-1] for text in texts), ""]
    assert "1 lines are not UTF-8 and were translated with replacement characters: line 4" in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["input.de", "output.en"]  # the committed chunks are gone


def test_blank_and_long_lines_of_every_chunk_are_kept_and_named_by_their_line_in_the_file(
    engine, tmp_path, caplog
):
    texts = [SOURCES[0], "", LONG_LINE, SOURCES[1], "  ", LONG_LINE]
    source = write_input(tmp_path / "input.de", [text.encode() for text in texts])
    job = CorpusJob(str(source), str(tmp_path / "output.en"), CorpusSettings(chunk_lines=2))
    with caplog.at_level("WARNING"):
        translate_corpus(engine_translator(engine, GREEDY, job.settings), job, show_progress=False)
    output = (tmp_path / "output.en").read_text().split("\n")
    assert output == [*engine.translate(texts, GREEDY), ""]
    assert output[1] == output[4] == "" and all(output[index] for index in (0, 2, 3, 5))
    cut = "lines are longer than the model's 1024 positions and were cut to their first 1024 tokens"
    assert f"1 of 2 {cut}: line 3" in caplog.text and f"1 of 2 {cut}: line 6" in caplog.text


def test_a_line_that_is_not_utf8_stops_the_run_before_it_translates_naming_the_line(engine, tmp_path):
    source = write_input(tmp_path / "input.de", [*(line.encode() for line in SOURCES), b"Ein \xe9 Hund."])
    job = CorpusJob(str(source), str(tmp_path / "output.en"), CorpusSettings(chunk_lines=3), PROVENANCE)
    translate_chunk = Stop(None, chunks=0)  # would stop at the first chunk translated
    with pytest.raises(CorpusTranslationError) as refusal:
        translate_corpus(translate_chunk, job, show_progress=False)
    assert str(refusal.value) == (
        f"{source} line 12 is not UTF-8 (byte 0xe9 at position 4): fix the line, or give --errors replace to "
        "translate it with replacement characters"
    )
    assert os.listdir(tmp_path) == ["input.de"]


@pytest.mark.parametrize("suffix", COMPRESSIONS)
def test_a_compressed_input_translates_as_the_plain_one(engine, tmp_path, suffix):
    plain = translated(engine, tmp_path)
    source = tmp_path / f"input.de{suffix}"
    source.write_bytes(COMPRESSIONS[suffix]((tmp_path / "input.de").read_bytes()))
    job = CorpusJob(str(source), str(tmp_path / "compressed.en"), CorpusSettings(chunk_lines=3), PROVENANCE)
    translate_corpus(engine_translator(engine, GREEDY, job.settings), job, show_progress=False)
    assert (tmp_path / "compressed.en").read_bytes() == plain


@pytest.mark.skipif(".zst" in COMPRESSIONS, reason="zstandard is installed: .zst reads as the others do")
def test_a_zst_input_without_zstandard_is_refused_rather_than_read_raw(tmp_path):
    source = tmp_path / "input.de.zst"
    source.write_bytes(b"\x28\xb5\x2f\xfd compressed")
    with pytest.raises(
        CorpusError, match=f"^{source}: reading .zst files needs a library: pip install zstandard$"
    ):
        translate_corpus(mirror, CorpusJob(str(source), str(tmp_path / "output.en")), show_progress=False)


def test_a_stopped_run_resumed_gives_the_uninterrupted_sampled_file_byte_for_byte(engine, tmp_path):
    uninterrupted = translated(engine, tmp_path, SAMPLING, name="uninterrupted.en", seed=7)
    settings = CorpusSettings(chunk_lines=3, seed=7)
    job = CorpusJob(str(tmp_path / "input.de"), str(tmp_path / "output.en"), settings, PROVENANCE)
    translate_chunk = engine_translator(engine, SAMPLING, settings)
    with pytest.raises(KeyboardInterrupt):
        translate_corpus(Stop(translate_chunk, chunks=2), job, show_progress=False)
    assert not (tmp_path / "output.en").exists()
    assert sorted(os.listdir(tmp_path / "output.en.chunks")) == ["000000000", "000000001", "fingerprint.json"]

    resumed = Stop(translate_chunk, chunks=2)  # the two chunks left, and not one more
    translate_corpus(resumed, job, show_progress=False)
    assert (tmp_path / "output.en").read_bytes() == uninterrupted
    assert resumed.chunks == 0 and not (tmp_path / "output.en.chunks").exists()


@pytest.mark.parametrize(
    ("change", "part"),
    [
        ({"provenance": {**PROVENANCE, "model": "another digest"}}, "model"),
        ({"provenance": {**PROVENANCE, "decoding": "other options"}}, "decoding"),
        ({"settings": CorpusSettings(chunk_lines=3, seed=1)}, "settings"),
        ({}, "input"),
    ],
)
def test_a_run_with_another_model_options_or_input_is_refused_in_one_line(engine, tmp_path, change, part):
    translated(engine, tmp_path, name="first.en")  # writes input.de
    job = CorpusJob(
        str(tmp_path / "input.de"), str(tmp_path / "output.en"), CorpusSettings(chunk_lines=3), PROVENANCE
    )
    translate_chunk = engine_translator(engine, GREEDY, job.settings)
    with pytest.raises(KeyboardInterrupt):
        translate_corpus(Stop(translate_chunk, chunks=1), job, show_progress=False)
    if part == "input":
        (tmp_path / "input.de").write_text("Ein anderer Satz.\n" + (tmp_path / "input.de").read_text())
    with pytest.raises(CorpusTranslationError) as refusal:
        translate_corpus(translate_chunk, dataclasses.replace(job, **change), show_progress=False)
    chunks = tmp_path / "output.en.chunks"
    assert str(refusal.value) == (
        f"{chunks} holds the chunks of a run with other {corpus_translation.FINGERPRINT_PARTS[part]}: give "
        f"that run's to continue it, or delete {chunks} to start again"
    )
    assert sorted(os.listdir(chunks)) == ["000000000", "fingerprint.json"]  # nothing mixed in


def test_the_model_digest_follows_the_weights_and_tokenizer_not_the_model_card(tiny_model_dir, tmp_path):
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    digest = model_digest(str(model))
    (model / "README.md").write_text("# A model card, rewritten after selection\n")
    assert model_digest(str(model)) == digest
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    (model / "tokenizer.json").write_text(json.dumps({**tokenizer, "truncation": {"max_length": 5}}))
    assert model_digest(str(model)) != digest


def test_nbest_lists_in_text_and_json_lines(engine, tmp_path):
    beam = GREEDY.replace(num_beams=3)
    text = translated(engine, tmp_path, beam, name="nbest.en", nbest=2).decode().split("\n")[:-1]
    jsonl = translated(engine, tmp_path, beam, name="nbest.jsonl", nbest=2, output_format="jsonl")
    records = [json.loads(line) for line in jsonl.decode().splitlines()]
    best = engine.translate_nbest(SOURCES, beam)
    assert text == [text for each in best for text, _ in each[:2]]
    assert [(record["index"], record["rank"]) for record in records] == [
        (i, r) for i in range(11) for r in (0, 1)
    ]
    assert [record["text"] for record in records] == [text for each in best for text, _ in each[:2]]
    assert [record["score"] for record in records] == pytest.approx(
        [score for each in best for _, score in each[:2]]
    )
    assert all(
        first["score"] >= second["score"] for first, second in zip(records[::2], records[1::2], strict=True)
    )
    with pytest.raises(
        CorpusTranslationError, match="--nbest 4 lists beam search's best translations: give --num-beams 4"
    ):
        engine_translator(engine, beam, CorpusSettings(nbest=4))


def test_sampling_with_a_seed_is_reproducible_and_another_seed_draws_otherwise(engine, tmp_path):
    first = translated(engine, tmp_path, SAMPLING, name="first.en", seed=1)
    assert translated(engine, tmp_path, SAMPLING, name="again.en", seed=1) == first
    assert translated(engine, tmp_path, SAMPLING, name="other.en", seed=2) != first
    assert translated(engine, tmp_path, SAMPLING, name="chunked.en", seed=1, chunk_lines=4) != first


class Process:
    """Stands in for accelerate's state in process `index` of `count` (no one to wait for)."""

    def __init__(self, index: int, count: int):
        self.process_index, self.num_processes, self.is_main_process = index, count, index == 0

    def wait_for_everyone(self):
        pass

    def main_process_first(self):
        return contextlib.nullcontext()


def test_processes_share_the_chunks_and_the_main_one_joins_them_into_one_processs_file(
    engine, tmp_path, monkeypatch
):
    alone = translated(engine, tmp_path, name="alone.en")
    settings = CorpusSettings(chunk_lines=3)
    job = CorpusJob(str(tmp_path / "input.de"), str(tmp_path / "output.en"), settings, PROVENANCE)
    translate_chunk = engine_translator(engine, GREEDY, settings)
    monkeypatch.setattr(corpus_translation, "PartialState", lambda: Process(1, 2))
    translate_corpus(translate_chunk, job, show_progress=False)
    assert sorted(os.listdir(tmp_path / "output.en.chunks")) == [
        "000000001",
        "000000003",
    ]  # the main one records
    monkeypatch.setattr(corpus_translation, "PartialState", lambda: Process(0, 2))
    translate_corpus(translate_chunk, job, show_progress=False)
    assert (tmp_path / "output.en").read_bytes() == alone
    with pytest.raises(
        CorpusTranslationError, match="2 processes share a corpus through files: give --input FILE"
    ):
        translate_corpus(translate_chunk, CorpusJob("-", "out.en"), show_progress=False)


def script_flags(tiny_model_dir, source, output):
    return [tiny_model_dir, "--input", source, "--output", output, "--num-beams", "1",
            "--max-new-tokens", "3", "--chunk-lines", "3", "--device", "cpu", "--quiet"]  # fmt: skip


def test_translate_script_stopped_refuses_other_options_and_resumes_to_the_same_file(
    tiny_model_dir, tmp_path, monkeypatch
):
    source = write_input(tmp_path / "input.de", [line.encode() for line in SOURCES])
    run_script(
        "translate.py", *script_flags(tiny_model_dir, source, tmp_path / "uninterrupted.en"), check=True
    )
    flags = script_flags(tiny_model_dir, source, tmp_path / "output.en")
    chunks = tmp_path / "output.en.chunks"
    stop = Stop(TransformersEngine.translate, chunks=2)
    monkeypatch.setattr(TransformersEngine, "translate", lambda engine, *args: stop(engine, *args))
    stopped = run_script("translate.py", *flags)
    assert stopped.returncode == 130
    assert (
        f"Stopped: {chunks} keeps the chunks committed; the same command continues after them"
        in stopped.stderr
    )
    monkeypatch.undo()

    refused = run_script("translate.py", *flags, "--max-new-tokens", "4")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        f"error: {chunks} holds the chunks of a run with other decoding options: give that run's to continue "
        f"it, or delete {chunks} to start again"
    )
    run_script("translate.py", *flags, check=True)
    assert (tmp_path / "output.en").read_bytes() == (tmp_path / "uninterrupted.en").read_bytes()


def translate_command(*args, processes: int = 1) -> list[str]:
    """scripts/translate.py run as a new process, or as `processes` of them under torchrun."""
    launcher = (
        ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
        if processes > 1
        else []
    )
    return [sys.executable, *launcher, str(SCRIPTS / "translate.py"), *map(str, args)]


@pytest.mark.slow  # a new process, killed mid-run
def test_translate_script_killed_by_sigkill_resumes_to_the_uninterrupted_file(tiny_model_dir, tmp_path):
    source = write_input(tmp_path / "input.de", [line.encode() for line in SOURCES * 40])  # 147 chunks
    run_script(
        "translate.py", *script_flags(tiny_model_dir, source, tmp_path / "uninterrupted.en"), check=True
    )
    flags = script_flags(tiny_model_dir, source, tmp_path / "output.en")
    chunks = tmp_path / "output.en.chunks"
    killed = subprocess.Popen(translate_command(*flags), start_new_session=True, stderr=subprocess.DEVNULL)
    while killed.poll() is None and len(list(chunks.glob("0*"))) < 3:
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert not (tmp_path / "output.en").exists() and len(list(chunks.glob("0*"))) < 147
    run_script("translate.py", *flags, check=True)
    assert (tmp_path / "output.en").read_bytes() == (tmp_path / "uninterrupted.en").read_bytes()


@pytest.mark.slow  # two processes under torchrun
def test_two_processes_write_one_processs_file(tiny_model_dir, tmp_path):
    source = write_input(tmp_path / "input.de", [line.encode() for line in SOURCES * 3])
    run_script("translate.py", *script_flags(tiny_model_dir, source, tmp_path / "one.en"), check=True)
    command = translate_command(*script_flags(tiny_model_dir, source, tmp_path / "two.en"), processes=2)
    run_in_session(command, {**os.environ, "OMP_NUM_THREADS": "1"})
    assert (tmp_path / "two.en").read_bytes() == (tmp_path / "one.en").read_bytes()
