"""The precision rule: bf16 where the hardware runs it natively and faster,
fp16 on a CUDA device without bf16, fp32 else."""

import logging

import pytest
import torch

from hf_vanilla import precision
from hf_vanilla.precision import (
    CPU_BF16_MIN_SPEEDUP,
    auto_precision,
    cpu_description,
    cpu_has_native_bf16,
    resolve_precision,
)


@pytest.mark.parametrize(
    ("device_type", "cuda_bf16", "cpu_bf16", "expected"),
    [
        ("cuda", True, None, "bf16"),
        ("cuda", False, None, "fp16"),
        ("cpu", None, True, "bf16"),
        ("cpu", None, False, "no"),
        ("mps", None, None, "no"),
        ("xpu", None, None, "no"),
    ],
)
def test_auto_follows_the_hardware(device_type, cuda_bf16, cpu_bf16, expected):
    chosen = resolve_precision("auto", device_type, cuda_bf16=cuda_bf16, cpu_bf16=cpu_bf16)
    assert chosen.mixed_precision == expected
    assert chosen.dtype == {"bf16": torch.bfloat16, "fp16": torch.float16, "no": torch.float32}[expected]
    assert chosen.reason


def test_auto_says_why_in_the_log(caplog):
    with caplog.at_level(logging.INFO, logger="hf_vanilla.precision"):
        resolve_precision("auto", "cpu", cpu_bf16=False)
    assert "precision: float32 (auto: the CPU runs bf16 slower" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hf_vanilla.precision"):
        chosen = resolve_precision("auto", "cpu")
    assert f"precision: {chosen.dtype_name} (auto: {chosen.reason})" in caplog.text


def test_explicit_half_precision_on_a_cpu_where_it_is_slower_warns_but_is_honoured(caplog):
    with caplog.at_level(logging.WARNING, logger="hf_vanilla.precision"):
        chosen = resolve_precision("bfloat16", "cpu", cpu_bf16=False)
    assert chosen.mixed_precision == "bf16"
    assert "where it runs slower than float32" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_vanilla.precision"):
        assert resolve_precision("float16", "cpu", cpu_bf16=True).mixed_precision == "fp16"
    assert "no native fp16 matmuls" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_vanilla.precision"):
        resolve_precision("bf16", "cpu", cpu_bf16=True)
        resolve_precision("float32", "cpu", cpu_bf16=False)
    assert caplog.text == ""


def test_unknown_precision_is_an_error_naming_the_choices():
    with pytest.raises(ValueError, match="unknown precision 'int8'; choose one of auto, no, bf16, fp16"):
        resolve_precision("int8", "cpu")


def test_this_cpu_is_described_and_detected_consistently():
    description = cpu_description()
    assert description["native_bf16"] == cpu_has_native_bf16()
    assert description["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    speedup = description["bf16_matmul_speedup"]
    assert (speedup is None) == (not cpu_has_native_bf16())
    pays = speedup is not None and speedup >= CPU_BF16_MIN_SPEEDUP
    assert auto_precision("cpu").mixed_precision == ("bf16" if pays else "no")


def test_bf16_is_chosen_by_its_measured_speed_not_by_the_instructions_alone(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    # an AMD EPYC (4.1x) and an Intel Xeon (0.52x), both with AVX512-BF16 and no AMX
    for speedup, expected in ((4.1, "bf16"), (0.52, "no"), (CPU_BF16_MIN_SPEEDUP, "bf16")):
        monkeypatch.setattr(precision, "_measured_bf16_speedup", lambda threads, speedup=speedup: speedup)
        chosen = auto_precision("cpu")
        assert chosen.mixed_precision == expected
        assert f"ran {speedup:.2f}x fp32's" in chosen.reason
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(
        precision, "_measured_bf16_speedup", lambda threads: pytest.fail("probed emulated bf16")
    )
    assert auto_precision("cpu").mixed_precision == "no" and "no native bf16" in auto_precision("cpu").reason
