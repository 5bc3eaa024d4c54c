"""The device and precision to train and decode in,
chosen from what the hardware has and runs fastest, never assumed.

CPUs differ: one with only AVX2 multiplies bf16 matrices far slower than fp32, and even the bf16 instructions
do not settle it: with AVX512-BF16 and no AMX, one CPU runs bf16 faster and another slower (measured:
docs/training.md, "Precision"). So "auto" (the default everywhere) asks the hardware: bf16 on a CUDA device
that supports it, fp16 on an older CUDA device; on a CPU, bf16 only where it has the instructions and a short
matmul probe runs bf16 at least `CPU_BF16_MIN_SPEEDUP` times as fast as fp32; fp32 otherwise.
"""

import functools
import logging
import time
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
# Autocast's casts take back part of a faster matmul (docs/speed.md, "Precision on a CPU"), so bf16 has to
# multiply well ahead of fp32 to pay.
CPU_BF16_MIN_SPEEDUP = 1.5

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


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that a host clock read after it counts that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak_flops(
    dtype: torch.dtype,
    seconds: float = 0.5,
    repeats: int = 5,
    size: int | None = None,
    clock: str = "wall",
    device: str | torch.device = "cpu",
) -> float:
    """FLOP/s of a square matmul in `dtype` on random data, best of `repeats` runs of about `seconds` each.

    The roofline MFU is measured against; the size (2048 on CPU, 8192 on a GPU) fills the device.
    """
    device = torch.device(device)
    size = size or (2048 if device.type == "cpu" else 8192)
    a, b = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(2))
    now = CLOCKS[clock]
    a @ b  # warm-up
    synchronize(device)
    start = now()
    a @ b
    synchronize(device)
    calls = max(1, round(seconds / max(now() - start, 1e-9)))
    best = 0.0
    for _ in range(repeats):
        start = now()
        for _ in range(calls):
            a @ b
        synchronize(device)
        best = max(best, calls * 2 * size**3 / (now() - start))
    return best


def cpu_description() -> dict[str, object]:
    """The CPU facts a reported number depends on: model name, torch's vector capability, native bf16 and how
    much faster it multiplies (None without native bf16)."""
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
        "bf16_matmul_speedup": cpu_bf16_matmul_speedup(),
        "threads": torch.get_num_threads(),
    }


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX512-BF16 or AMX) through oneDNN.

    oneDNN's own check honours ONEDNN_MAX_CPU_ISA, so `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2` makes
    a bf16 machine behave, and be detected, as an AVX2-only one. Give such a run a TORCHINDUCTOR_CACHE_DIR of
    its own: inductor's cache does not tell the two apart, and a compiled step reusing the AVX512 build
    crashed.
    """
    instructions = _guarded(lambda: torch.cpu._is_avx512_bf16_supported()) or _guarded(
        lambda: torch.cpu._is_amx_tile_supported()
    )
    return instructions and _guarded(lambda: torch.ops.mkldnn._is_mkldnn_bf16_supported())


def cpu_bf16_matmul_speedup() -> float | None:
    """bf16 matmul FLOP/s over fp32's on this CPU at the current thread count (None without native bf16).

    Measured once a thread count (~0.2 s, 1024-wide matrices): the instructions alone do not say which is
    faster.
    """
    if not cpu_has_native_bf16():
        return None  # emulated bf16 is far slower, and probing it would take seconds
    return _measured_bf16_speedup(torch.get_num_threads())


@functools.cache
def _measured_bf16_speedup(threads: int) -> float:
    del threads  # the cache key: the speed is the current thread count's
    flops = {
        dtype: matmul_peak_flops(dtype, seconds=0.02, repeats=3, size=1024)
        for dtype in (torch.float32, torch.bfloat16)
    }
    return round(flops[torch.bfloat16] / flops[torch.float32], 2)


def cpu_bf16_pays(given: bool | None = None) -> tuple[bool, str]:
    """Whether bf16 autocast speeds this CPU up, and why: as `given`, else measured
    (the rule of `auto_precision`)."""
    if given is not None:
        return given, f"the CPU runs bf16 {'faster' if given else 'slower'} (given)"
    speedup = cpu_bf16_matmul_speedup()
    if speedup is None:
        capability = torch.backends.cpu.get_cpu_capability()
        return False, (
            f"the CPU ({capability}) has no native bf16, where a bf16 matmul runs tens of times slower than "
            "float32 (docs/speed.md)"
        )
    pays = speedup >= CPU_BF16_MIN_SPEEDUP
    return pays, (
        f"the CPU has native bf16 (AVX512-BF16 or AMX) and its bf16 matmuls ran {speedup:.2f}x fp32's, "
        f"{'at least' if pays else 'under'} the {CPU_BF16_MIN_SPEEDUP}x that pays for autocast"
    )


def auto_precision(
    device_type: str, cuda_bf16: bool | None = None, cpu_bf16: bool | None = None
) -> Precision:
    """The fastest precision `device_type` ("cpu", "cuda", ...) runs natively; the probes can be given
    (`cpu_bf16`: whether bf16 pays on this CPU)."""
    if device_type == "cuda":
        if cuda_bf16 is None:
            cuda_bf16 = torch.cuda.is_bf16_supported()
        if cuda_bf16:
            return Precision("bf16", "the CUDA device supports bf16")
        return Precision("fp16", "the CUDA device has no bf16 support")
    if device_type == "cpu":
        pays, reason = cpu_bf16_pays(cpu_bf16)
        return Precision("bf16" if pays else "no", reason)
    return Precision("no", f"no half-precision rule for device type {device_type!r}")


def resolve_device(device: str | None = None) -> torch.device:
    """`device`, or else the GPU if there is one and the CPU if not; an absent GPU asked for is an error."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but torch sees no CUDA GPU; use --device cpu")
    return resolved


def resolve_precision(
    requested: str, device_type: str, cuda_bf16: bool | None = None, cpu_bf16: bool | None = None
) -> Precision:
    """`requested` ("auto", an accelerate name "no"/"bf16"/"fp16" or a dtype name) as a Precision.

    "auto" follows `auto_precision`; an explicit half precision on a CPU where it runs slower than fp32 is
    honoured with a warning.
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
        if name == "fp16":
            pays, reason = False, "CPUs have no native fp16 matmuls"
        else:
            pays, reason = cpu_bf16_pays(cpu_bf16)
        if not pays:
            logger.warning(
                "precision %s was asked for on a CPU (%s) where it runs slower than float32: %s (use auto or "
                "float32)",
                requested,
                torch.backends.cpu.get_cpu_capability(),
                reason,
            )
    return Precision(name, "asked for")
