"""The precision to train and decode in, chosen from what the hardware runs natively, never assumed.

CPUs differ: one with AVX512-BF16 or AMX multiplies bf16 matrices ~4x faster than fp32, one with only AVX2
~100x slower (0.9 against 135 GFLOP/s measured). So "auto" (the default everywhere) asks the hardware:
bf16 on a CUDA device that supports it or a CPU with native bf16, fp16 on an older CUDA device, fp32 otherwise.
"""

import logging
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

# accelerate's mixed_precision names and the dtype each stands for.
MIXED_PRECISION_DTYPES = {"no": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_NAMES = {"float32": "no", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class Precision:
    """A chosen precision: accelerate's `mixed_precision` name, and why it was chosen."""

    mixed_precision: str
    reason: str

    @property
    def dtype(self) -> torch.dtype:
        return MIXED_PRECISION_DTYPES[self.mixed_precision]

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def _guarded(check) -> bool:
    """A private torch capability probe, False where this torch build lacks it."""
    try:
        return bool(check())
    except (AttributeError, RuntimeError):
        return False


def cpu_description() -> dict[str, object]:
    """The CPU facts a reported number depends on: model name, torch's vector capability, native bf16."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(
                (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model
            )
    except OSError:
        pass
    return {
        "cpu_model": model,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": cpu_has_native_bf16(),
        "threads": torch.get_num_threads(),
    }


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX512-BF16 or AMX) through oneDNN.

    oneDNN's own check honours ONEDNN_MAX_CPU_ISA, so `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`
    makes a bf16 machine behave, and be detected, as an AVX2-only one. Give such a run a TORCHINDUCTOR_CACHE_DIR of
    its own: inductor's cache does not tell the two apart, and a compiled step reusing the AVX512 build crashed.
    """
    instructions = _guarded(lambda: torch.cpu._is_avx512_bf16_supported()) or _guarded(
        lambda: torch.cpu._is_amx_tile_supported()
    )
    return instructions and _guarded(lambda: torch.ops.mkldnn._is_mkldnn_bf16_supported())


def auto_precision(device_type: str, cuda_bf16: bool | None = None, cpu_bf16: bool | None = None) -> Precision:
    """The fastest precision `device_type` ("cpu", "cuda", ...) runs natively; the probes can be given."""
    if device_type == "cuda":
        if cuda_bf16 is None:
            cuda_bf16 = torch.cuda.is_bf16_supported()
        if cuda_bf16:
            return Precision("bf16", "the CUDA device supports bf16")
        return Precision("fp16", "the CUDA device has no bf16 support")
    if device_type == "cpu":
        if cpu_bf16 is None:
            cpu_bf16 = cpu_has_native_bf16()
        if cpu_bf16:
            return Precision("bf16", "the CPU has native bf16 (AVX512-BF16 or AMX)")
        capability = torch.backends.cpu.get_cpu_capability()
        return Precision("no", f"the CPU ({capability}) has no native bf16, where bf16 matmuls are ~100x slower")
    return Precision("no", f"no half-precision rule for device type {device_type!r}")


def resolve_precision(
    requested: str, device_type: str, cuda_bf16: bool | None = None, cpu_bf16: bool | None = None
) -> Precision:
    """`requested` ("auto", an accelerate name "no"/"bf16"/"fp16" or a dtype name) as a Precision.

    "auto" follows `auto_precision`; an explicit half precision on a CPU without native bf16 is honoured
    with a warning, since its matmuls will be far slower than fp32.
    """
    if requested == "auto":
        chosen = auto_precision(device_type, cuda_bf16, cpu_bf16)
        logger.info("precision: %s (auto: %s)", chosen.dtype_name, chosen.reason)
        return chosen
    name = DTYPE_NAMES.get(requested, requested)
    if name not in MIXED_PRECISION_DTYPES:
        choices = ["auto", *MIXED_PRECISION_DTYPES, *DTYPE_NAMES]
        raise ValueError(f"unknown precision {requested!r}; choose one of {', '.join(choices)}")
    if name != "no" and device_type == "cpu":
        if cpu_bf16 is None:
            cpu_bf16 = cpu_has_native_bf16()
        if not cpu_bf16 or name == "fp16":
            logger.warning(
                "precision %s was asked for on a CPU (%s) without native %s: its matmuls will be far slower "
                "than float32 (use auto or float32)",
                requested,
                torch.backends.cpu.get_cpu_capability(),
                "fp16" if name == "fp16" else "bf16",
            )
    return Precision(name, "asked for")
