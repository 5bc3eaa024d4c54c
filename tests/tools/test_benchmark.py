"""The benchmark runs on a tiny model and reports what it promises; the model's speed paths change no
result."""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from torch.utils.flop_counter import FlopCounterMode
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.model.attention_kernels import AUTO_ATTENTION, MATMUL_ATTENTION
from hf_vanilla.tools.benchmark import (
    BenchmarkSettings,
    PeakMemory,
    benchmark_config,
    format_table,
    make_generation,
    recorded_validation_bleu,
    resolve_dtypes,
    run_benchmark,
    save_results,
    training_batch,
    training_flops,
)
from hf_vanilla.training.loss import label_smoothed_cross_entropy

# float32 and "auto": bf16 cases only where this CPU runs bf16 natively (elsewhere they would take minutes).
DTYPES = ("float32", "auto")


@pytest.fixture(scope="module")
def results():
    settings = BenchmarkSettings(
        "tiny",
        target_tokens=64,
        repeats=1,
        new_tokens=2,
        generation_batch_sizes=(2, 1),
        dtypes=DTYPES,
        generation_caches=("cached", "uncached", "static"),
        compute_types=("int8", "float32"),
        peak_seconds=0.02,
    )
    return run_benchmark(settings)


def test_results_have_every_case_with_rates_ratios_mfu_and_memory(results):
    # No figure that depends on the machine's speed is asserted: MFU is whatever this CPU gives.
    dtypes = resolve_dtypes(DTYPES, "cpu")
    assert results["settings"]["dtypes"] == list(dtypes) and set(results["peak_flops"]) == set(dtypes)
    assert results["parameters"]["marian"] > results["parameters"]["ours"]  # Marian adds zero biases
    training = {(case["dtype"], case["attn_implementation"]) for case in results["training"]}
    assert training == {(d, a) for d in dtypes for a in ("eager", "sdpa")}
    flops = results["settings"]["training_flops"]
    for case in results["training"]:
        for name in ("ours", "marian"):
            rates = case[name]
            assert rates["per_second"] > 0 and rates["peak_memory_bytes"] is not None
            peak = results["peak_flops"][case["dtype"]]
            assert rates["mfu"] == pytest.approx(flops / statistics.median(rates["seconds"]) / peak)
            assert len(rates["seconds"]) == 1 and rates["first_step_seconds"] > 0
        assert case["ratio"] == pytest.approx(case["ours"]["per_second"] / case["marian"]["per_second"])
    generation = {(c["dtype"], c["batch_size"], c["num_beams"], c["cache"]) for c in results["generation"]}
    caches = ("cached", "uncached", "static")
    assert generation == {(d, b, n, c) for d in dtypes for b in (2, 1) for n in (1, 4) for c in caches}
    assert all(case["ours"]["per_second"] > 0 and case["ratio"] > 0 for case in results["generation"])


def test_report_names_the_hardware_and_software(results):
    environment = results["environment"]
    assert environment["threads"] == torch.get_num_threads() and environment["device"] == "cpu"
    assert environment["torch"] == torch.__version__ and isinstance(environment["native_bf16"], bool)
    first_line = format_table(results).splitlines()[0]
    assert environment["cpu_model"] in first_line and environment["cpu_capability"] in first_line


def test_auto_is_float32_on_a_cpu_without_native_bf16():
    """An AVX2-only CPU, emulated: bf16 matmuls there are ~40x slower than fp32, so auto must not pick
    bf16."""
    code = (
        "from hf_vanilla.tools.benchmark import environment, describe_environment, resolve_dtypes; "
        "print(resolve_dtypes(('auto',), 'cpu'), resolve_dtypes(('float32', 'auto'), 'cpu')); "
        "print(describe_environment(environment()))"
    )
    emulation = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    output = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **emulation},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert output[0] == "('float32',) ('float32',)"
    assert "AVX2, no native bf16" in output[1]


def test_each_engine_decodes_every_shape_beside_ours_in_each_compute_type_it_takes(results):
    pytest.importorskip("ctranslate2")
    assert [(case["batch_size"], case["num_beams"]) for case in results["engines"]] == [
        (2, 1),
        (2, 4),
        (1, 1),
        (1, 4),
    ]
    expected = [("transformers", "float32"), ("ctranslate2", "int8"), ("ctranslate2", "float32")]
    for case in results["engines"]:
        assert [(row["engine"], row["compute_type"]) for row in case["engines"]] == expected
        for row in case["engines"]:
            assert row["per_second"] > 0
            assert row["ratio"] == pytest.approx(case["ours"]["per_second"] / row["per_second"])
    table = format_table(results)
    assert "batch 1 beam 4" in table and " ctranslate2 " in table and " int8 " in table


def test_table_and_json(results, tmp_path):
    table = format_table(results)
    assert "float32 sdpa" in table and "float32 batch 1 beam 4 uncached" in table
    path = save_results(results, tmp_path / "out" / "benchmark.json")
    assert json.loads(path.read_text())["training"][0]["ours"]["mfu"] == results["training"][0]["ours"]["mfu"]
    assert [p.name for p in path.parent.iterdir()] == ["benchmark.json"]


def test_training_flops_equal_torchs_flop_counter_on_an_unpadded_batch():
    config = benchmark_config("tiny", vocab_size=100)
    model = VanillaTransformerForConditionalGeneration(config)
    model.set_attn_implementation("eager")
    batch = training_batch(config, 200)
    batch["attention_mask"].fill_(1)
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == -100, 5)
    with FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    assert training_flops(config, batch) == counter.get_total_flops()


def test_training_batch_holds_about_the_requested_target_tokens():
    batch = training_batch(benchmark_config("tiny"), 4096)
    assert 3900 < (batch["labels"] != -100).sum() < 4300
    assert (batch["attention_mask"] == 0).any()  # padded like a real length-bucketed batch


def test_peak_memory_sees_a_temporary_tensor():
    with PeakMemory() as memory:
        block = torch.ones(16 * 2**20)  # 64 MiB
        time.sleep(0.05)
        del block
    assert 60 * 2**20 < memory.peak_bytes < 100 * 2**20


QUICK_TINY_BENCHMARK = [sys.executable, "scripts/tools/benchmark.py", "--size", "tiny", "--quick"]


def test_script_quick_mode_writes_json(tmp_path):
    output = tmp_path / "bench.json"
    command = [*QUICK_TINY_BENCHMARK, "--dtype", "float32", "--attn", "sdpa", "--generation-batch-sizes", "1"]
    command += ["--engine", "transformers", "--output", str(output)]
    command += ["--clock", "cpu", "--threads", "1"]
    this_checkout = {**os.environ, "PYTHONPATH": str(REPO)}  # not an installed copy elsewhere
    run = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO, env=this_checkout)
    results = json.loads(output.read_text())
    assert (results["settings"]["clock"], results["settings"]["threads"]) == ("cpu", 1)
    assert [case["dtype"] for case in results["training"]] == ["float32"]
    assert {row["engine"] for case in results["engines"] for row in case["engines"]} == {"transformers"}
    [warning] = [line for line in run.stderr.splitlines() if " WARNING " in line]
    assert "random weights" in warning and "scripts/tools/benchmark_serving.py CHECKPOINT" in warning


def test_a_compute_type_the_cpu_lacks_is_one_line_before_any_timing():
    ctranslate2 = pytest.importorskip("ctranslate2")
    if "float16" in ctranslate2.get_supported_compute_types("cpu"):
        pytest.skip("this CPU runs float16")
    command = [*QUICK_TINY_BENCHMARK, "--compute-type", "float16"]
    run = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert run.returncode != 0 and "Traceback" not in run.stderr and "benchmark tiny" not in run.stderr
    assert run.stderr.splitlines()[-1].startswith("error: compute type float16 is not supported")


# The speed paths of the model compute what the plain ones do.


def padded_batch(batch_size: int, vocab: int = 40) -> dict[str, torch.Tensor]:
    source, target = torch.randint(4, vocab, (batch_size, 9)), torch.randint(4, vocab, (batch_size, 7))
    attention_mask = torch.ones_like(source)
    attention_mask[::3, 5:] = 0
    return {"input_ids": source, "attention_mask": attention_mask, "decoder_input_ids": target}


@pytest.fixture
def matmul_path_calls(monkeypatch) -> list:
    calls = []
    registered = ALL_ATTENTION_FUNCTIONS._global_mapping
    plain = registered[MATMUL_ATTENTION]
    monkeypatch.setitem(registered, MATMUL_ATTENTION, lambda *a, **k: calls.append(1) or plain(*a, **k))
    return calls


def test_sdpa_by_matmuls_in_bfloat16_training_matches_eager(matmul_path_calls):
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("tiny", vocab_size=40)
    )
    batch = padded_batch(6)
    logits = {}
    for implementation in ("eager", "sdpa", AUTO_ATTENTION):
        model.set_attn_implementation(implementation)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits[implementation] = model.eval()(**batch).logits.float()
    torch.testing.assert_close(logits[AUTO_ATTENTION], logits["eager"], atol=2e-2, rtol=0)
    assert len(matmul_path_calls) == 6  # every attention of the 2 + 2 layers, and none of "sdpa"'s


def test_sdpa_by_matmuls_when_decoding_a_batch_matches_eager(matmul_path_calls):
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("tiny", vocab_size=40)
    )
    batch = padded_batch(20)  # 20 sequences: float32 decoding steps take the matmul path
    del batch["decoder_input_ids"]
    runs = {}
    for implementation in ("eager", AUTO_ATTENTION):
        model.set_attn_implementation(implementation)
        runs[implementation] = model.eval().generate(
            **batch, max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True
        )
    assert torch.equal(runs[AUTO_ATTENTION].sequences, runs["eager"].sequences)
    torch.testing.assert_close(torch.stack(runs[AUTO_ATTENTION].scores), torch.stack(runs["eager"].scores))
    assert matmul_path_calls


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_blockwise_loss_equals_one_cross_entropy_call(smoothing):
    logits = torch.randn(300, 5000, requires_grad=True)  # 6 row blocks on CPU
    labels = torch.randint(0, 5000, (300,))
    labels[::7] = -100
    expected = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=smoothing)
    loss = label_smoothed_cross_entropy(logits, labels, smoothing, (labels != -100).sum())
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(*(torch.autograd.grad(value, logits)[0] for value in (loss, expected)))


def test_logits_to_keep_projects_only_the_last_positions():
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("tiny", vocab_size=40)
    )
    batch = padded_batch(3)
    full = model.eval()(**batch).logits
    torch.testing.assert_close(model(**batch, logits_to_keep=2).logits, full[:, -2:])


@pytest.mark.parametrize("num_beams", [1, 4])
def test_static_cache_generates_what_the_dynamic_cache_does(num_beams):
    """The static cache (the one `generate` compiles on a GPU) gives positions as a tensor: same tokens,
    scores."""
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("tiny", vocab_size=40)
    ).eval()
    batch = padded_batch(5)
    del batch["decoder_input_ids"]
    runs = {}
    for cache in ("dynamic", "static"):
        runs[cache] = model.generate(
            **batch,
            num_beams=num_beams,
            max_new_tokens=8,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            **({"cache_implementation": "static"} if cache == "static" else {}),
        )
    assert torch.equal(runs["static"].sequences, runs["dynamic"].sequences)
    torch.testing.assert_close(torch.stack(runs["static"].scores), torch.stack(runs["dynamic"].scores))


@pytest.mark.parametrize("num_beams", [1, 4])
def test_cross_attention_keys_and_values_are_computed_once_per_generate(num_beams):
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("tiny", vocab_size=40)
    ).eval()
    calls = []
    for layer in model.model.decoder.layers:
        layer.encoder_attn.kv_proj.register_forward_hook(lambda *args: calls.append(1))
    batch = padded_batch(3)
    del batch["decoder_input_ids"]
    model.generate(**batch, num_beams=num_beams, min_new_tokens=6, max_new_tokens=6, do_sample=False)
    assert len(calls) == len(model.model.decoder.layers)


def test_static_compiled_generation_asks_generate_to_compile_on_any_device():
    class Recorder:
        def generate(self, **kwargs):
            self.kwargs = kwargs

    model = Recorder()
    make_generation(model, {}, num_beams=1, cache="static-compiled", new_tokens=2)()
    assert model.kwargs["cache_implementation"] == "static" and model.kwargs["use_cache"]
    compile_config = model.kwargs["compile_config"]
    assert compile_config._compile_all_devices and compile_config.options == {"freezing": True}
    make_generation(model, {}, num_beams=1, cache="static", new_tokens=2)()
    assert "compile_config" not in model.kwargs


def test_a_checkpoint_counts_as_trained_by_its_validation_bleu_never_its_test_bleu(tmp_path):
    """The benchmarks' guard against untrained checkpoints reads the validation BLEU of the card: a card that
    records only test scores gives None, not its test BLEU; of the validation rows, the first (cased) BLEU,
    not a higher lowercased one."""

    def card_with(*splits: str) -> Path:
        results = [
            EvalResult("translation", "local", "multi30k", "bleu", 30.0 + index, dataset_split=split)
            for index, split in enumerate(splits)
        ]
        directory = tmp_path / "-".join(splits)
        directory.mkdir()
        ModelCard.from_template(ModelCardData(model_name="m", eval_results=results)).save(
            directory / "README.md"
        )
        return directory

    assert recorded_validation_bleu(tmp_path) is None  # no card at all
    assert recorded_validation_bleu(card_with("test")) is None
    assert recorded_validation_bleu(card_with("validation", "test")) == 30.0
    assert recorded_validation_bleu(card_with("test", "validation", "validation")) == 31.0
