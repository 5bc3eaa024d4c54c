"""The load benchmark end to end on the tiny model and a few sentences: the report it writes names the CPU,
the decoding it resolved (and where each value came from), and each run at each thread count."""

import json

import pytest
from conftest import DE_EN, run_script

pytest.importorskip("ctranslate2")


def test_the_report_holds_the_decoding_and_every_run(tiny_model_dir, tiny_dataset, tmp_path):
    output = tmp_path / "serving.json"
    run = run_script(
        "tools/benchmark_serving.py", tiny_model_dir, "--dataset", tiny_dataset, *DE_EN,
        "--split", "validation", "--first-pairs", "4", "--max-new-tokens", "6", "--repeats", "1",
        "--engine", "ctranslate2", "--compute-type", "int8", "--thread-counts", "1", "--clients", "1", "2",
        "--requests", "4", "--requests-alone", "2", "--allow-untrained", "--output", output,
        "--log-level", "warning",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["cpu"] and report["engine"] == "ctranslate2" and report["compute_type"] == "int8"
    assert report["decoding"]["max_new_tokens"] == 6 and report["decoding"]["sources"]
    assert set(report["1 threads"]) >= {"translate_batch", "offline"}
