"""Speed of our model against a MarianMTModel of identical shape and weights, measured in one process.

The two models compute the same function (see `export.py`), so any difference in speed or memory is
implementation. Runs are interleaved (ours, Marian, ours, Marian...) and summarised by their median, because
the machine is shared and noisy; ratios are ours / Marian, above 1 meaning ours is faster (or uses more
memory). On a CPU the engines (`hf_vanilla.translation.engines`) decode beside ours too, each loaded before
any timing on ours saved (converted where it converts), a row each named by `engine` and `compute_type`, its
ratio ours / it. The weights are random and the output lengths forced: implementation speed;
scripts/tools/benchmark_serving.py times a trained checkpoint. Every report names what its numbers depend on:
the CPU (model, vector capability, native bf16 or not), threads, the GPU, the dtype and the library versions.
dtype "auto" is bf16 where the hardware runs it natively, else fp32.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import statistics
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from huggingface_hub import ModelCard
from tokenizers import Tokenizer, models
from tqdm.auto import tqdm
from transformers import CompileConfig, PreTrainedTokenizerFast

from hf_vanilla.extras import MissingExtra
from hf_vanilla.files import write_json
from hf_vanilla.model.attention_kernels import AUTO_ATTENTION
from hf_vanilla.model.configuration_vanilla import SIZE_FIELDS, VanillaTransformerConfig
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.model.modeling_vanilla import VanillaTransformerForConditionalGeneration
from hf_vanilla.precision import CLOCKS, cpu_description, matmul_peak_flops, resolve_precision, synchronize
from hf_vanilla.tools.export import to_marian
from hf_vanilla.translation.decoding import Batching
from hf_vanilla.translation.engines import (
    EngineSettings,
    TranslationEngine,
    compared_engines,
    engine_names,
    load_engine,
)

BENCHMARK_VOCAB_SIZE = 8000  # the joint BPE size used on Multi30k
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
MODEL_NAMES = ("ours", "marian")
# Multi30k sentences are about 15 tokens; a length-bucketed batch holds sentences of nearly equal length.
SENTENCE_LENGTHS = (17, 21)
SOURCE_LENGTH = 20

logger = logging.getLogger(__name__)
RANDOM_MODELS_WARNING = (
    "these models have random weights and forced output lengths: implementation speed only; for decoding "
    "speed on a trained checkpoint run scripts/tools/benchmark_serving.py CHECKPOINT"
)


def benchmark_config(size: str, **overrides) -> VanillaTransformerConfig:
    """A preset (`tiny`, `small`, `base`, `big`) with the benchmark's vocabulary."""
    return VanillaTransformerConfig.from_preset(size, **{"vocab_size": BENCHMARK_VOCAB_SIZE, **overrides})


def _random_sentences(
    config: VanillaTransformerConfig, count: int, lengths: tuple[int, int], generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` random sentences (ids past the special tokens, then </s>) of lengths in [low, high),
    right-padded."""
    low, high = lengths
    sentence_lengths = torch.randint(low, high, (count, 1), generator=generator)
    positions = torch.arange(high - 1)
    ids = torch.randint(len(SPECIAL_TOKENS), config.vocab_size, (count, high - 1), generator=generator)
    ids = ids.masked_fill(positions == sentence_lengths - 1, config.eos_token_id)
    mask = positions < sentence_lengths
    return ids.masked_fill(~mask, config.pad_token_id), mask.long()


def training_batch(
    config: VanillaTransformerConfig, target_tokens: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """A batch of about `target_tokens` labelled target tokens, with source and target lengths like
    Multi30k's."""
    generator = torch.Generator().manual_seed(seed)
    count = max(1, round(target_tokens / (sum(SENTENCE_LENGTHS) / 2 - 0.5)))
    input_ids, attention_mask = _random_sentences(config, count, SENTENCE_LENGTHS, generator)
    labels, label_mask = _random_sentences(config, count, SENTENCE_LENGTHS, generator)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels.masked_fill(label_mask == 0, -100),
    }


def generation_inputs(
    config: VanillaTransformerConfig, batch_size: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """`batch_size` source sentences of up to SOURCE_LENGTH tokens (all of it when the batch is one
    sentence)."""
    generator = torch.Generator().manual_seed(seed)
    shortest = SOURCE_LENGTH + 1 if batch_size == 1 else SOURCE_LENGTH - 3
    input_ids, attention_mask = _random_sentences(
        config, batch_size, (shortest, SOURCE_LENGTH + 2), generator
    )
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def training_flops(config: VanillaTransformerConfig, batch: dict[str, torch.Tensor]) -> int:
    """Model FLOPs of one training step (forward + backward = 3 x forward) on the batch's real tokens.

    Every weight matrix costs 2 FLOPs a token forward (the 6 * params * tokens rule, each stack's weights
    counted on the tokens that pass through them: source tokens for the encoder and the cross-attention
    keys/values, target tokens for the rest and the output projection); attention scores and weighted sums
    cost 2 * 2 * d_model per (query, key) pair, the causal ones counted in full as the kernels compute them.
    Padding, embedding lookups, norms and the loss are not counted.
    """
    d, vocab = config.d_model, config.vocab_size
    source_lengths = batch["attention_mask"].sum(1).double()
    target_lengths = (batch["labels"] != -100).sum(1).double()
    source_tokens, target_tokens = source_lengths.sum().item(), target_lengths.sum().item()
    feed_forward = 2 * d * config.d_ff
    weights = config.encoder_layers * (4 * d * d + feed_forward) * source_tokens
    weights += (
        config.decoder_layers * (6 * d * d + feed_forward) * target_tokens
    )  # self-attn, cross q/out, ffn
    weights += config.decoder_layers * 2 * d * d * source_tokens  # cross-attention keys and values
    weights += vocab * d * target_tokens
    pairs = config.encoder_layers * (source_lengths**2).sum().item()
    pairs += (
        config.decoder_layers * ((target_lengths**2).sum() + (target_lengths * source_lengths).sum()).item()
    )
    return int(3 * (2 * weights + 4 * d * pairs))


def resolve_dtypes(dtypes: tuple[str, ...], device_type: str) -> tuple[str, ...]:
    """dtype names ("auto", "float32", "bfloat16", "float16") as torch dtype names, "auto" by the hardware's
    rule."""
    resolved = (resolve_precision(dtype, device_type).dtype_name for dtype in dtypes)
    return tuple(dict.fromkeys(resolved))


class PeakMemory:
    """Peak resident memory above the level at entry, sampled from /proc every millisecond (Linux).

    Large blocks are returned to the system when freed (a fixed glibc mmap threshold), so what is resident
    tracks what is alive; the number is approximate and None where /proc or glibc is missing.
    """

    def __enter__(self) -> PeakMemory:
        self.peak_bytes = None
        self._statm = Path("/proc/self/statm")
        if not self._statm.exists():
            return self
        _return_freed_memory()
        self._baseline = self._resident()
        self._peak = self._baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _resident(self) -> int:
        return int(self._statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self._peak = max(self._peak, self._resident())

    def __exit__(self, *exc) -> None:
        if self._statm.exists():
            self._stop.set()
            self._thread.join()
            self.peak_bytes = max(self._peak, self._resident()) - self._baseline


class CudaPeakMemory:
    """Peak CUDA memory allocated by torch above the level at entry (the allocator's own statistics)."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self) -> CudaPeakMemory:
        synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self._baseline = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._baseline


def peak_memory(device: torch.device) -> PeakMemory | CudaPeakMemory:
    """What measures memory on `device`: CUDA allocator statistics on a GPU, resident memory on the CPU."""
    return CudaPeakMemory(device) if device.type == "cuda" else PeakMemory()


def _return_freed_memory() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: blocks from 1 MiB up are mmapped, unmapped when freed
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _autocast(dtype: torch.dtype, device_type: str = "cpu"):
    return torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32)


def make_training_step(model, batch: dict[str, torch.Tensor], dtype: torch.dtype) -> Callable[[], None]:
    """One update: forward with the model's own loss, backward, fused Adam (the paper's betas) step."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    device_type = batch["input_ids"].device.type

    def step() -> None:
        with _autocast(dtype, device_type):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


GENERATION_CACHES = ("cached", "uncached", "static", "static-compiled")


@dataclass
class CompileOnEveryDevice(CompileConfig):
    """A `CompileConfig` with which `generate` compiles on a CPU too, not on GPUs only.

    transformers 5.25 has no public switch for it: its own tests set the class field `_compile_all_devices`,
    which this one wrapper sets, the only place that names it."""

    _compile_all_devices = True


def make_generation(
    model, inputs: dict[str, torch.Tensor], num_beams: int, cache: str | bool, new_tokens: int
) -> Callable[[], None]:
    """`cache`: "cached" (a dynamic key/value cache; also True), "uncached" (also False), "static" (a
    preallocated cache, with which `generate` compiles the decoding step on a GPU), or "static-compiled" (the
    same, compiled on a CPU too, weights frozen into the graph: generate compiles on GPUs only unless
    told)."""
    cache = {True: "cached", False: "uncached"}.get(cache, cache)
    settings = {"use_cache": cache != "uncached"}
    if cache in ("static", "static-compiled"):
        settings["cache_implementation"] = "static"
    if cache == "static-compiled":
        settings["compile_config"] = CompileOnEveryDevice(mode=None, options={"freezing": True})

    def generate() -> None:
        with torch.inference_mode():
            model.generate(
                **inputs,
                num_beams=num_beams,
                do_sample=False,
                min_new_tokens=new_tokens,
                max_new_tokens=new_tokens,
                **settings,
            )

    return generate


def interleaved_seconds(
    runs: dict[str, Callable[[], None]],
    repeats: int,
    warmup: int = 1,
    clock: str = "wall",
    device: str | torch.device = "cpu",
) -> dict[str, list]:
    """Seconds of each run, called in turn (A B A B ...) `repeats` times after `warmup` rounds.

    `clock` "wall" is elapsed time; "cpu" is this process's CPU time, which other processes on a shared
    machine barely disturb (use it with one thread: threads spinning while they wait would count too). On a
    GPU the device is synchronised before each clock read.
    """
    device = torch.device(device)
    for _ in range(warmup):
        for run in runs.values():
            run()
    seconds = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            seconds[name].append(_seconds(run, CLOCKS[clock], device))
    return seconds


def _seconds(run: Callable[[], None], now: Callable[[], float], device: torch.device) -> float:
    synchronize(device)
    start = now()
    run()
    synchronize(device)
    return now() - start


@dataclass(frozen=True)
class Timing:
    """How a benchmark times its runs: `repeats` interleaved rounds on `clock` ("wall" or "cpu"), `device`
    synced."""

    repeats: int
    clock: str
    device: torch.device

    def interleaved(self, runs: dict[str, Callable[[], None]]) -> dict[str, list]:
        return interleaved_seconds(runs, self.repeats, clock=self.clock, device=self.device)

    def once(self, run: Callable[[], None]) -> float:
        return _seconds(run, CLOCKS[self.clock], self.device)


def _rates(work: float, seconds: list[float]) -> dict:
    """Median rate over the repeats, plus every sample."""
    return {"per_second": work / statistics.median(seconds), "seconds": seconds}


def recorded_validation_bleu(model_dir: str | os.PathLike) -> float | None:
    """The validation BLEU a checkpoint's model card records (its model-index, written by training and
    evaluation), or None: an untrained or random model records none. A cheap, honest sign that a checkpoint is
    trained, for benchmarks whose numbers depend on it (a random model decodes every sentence to its
    limit)."""
    card = Path(model_dir) / "README.md"
    if not card.is_file():
        return None
    results = ModelCard.load(card).data.eval_results or []
    # The split's first BLEU row is the cased sacreBLEU (training's greedy one, or evaluation's before its
    # lowercased and tokenized variants), so every report names the same figure.
    return next(
        (
            result.metric_value
            for result in results
            if result.metric_type == "bleu" and result.dataset_split == "validation"
        ),
        None,
    )


def synthetic_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose tokens are the ids themselves: what CTranslate2 needs for random ids."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"t{index}": index for index in range(len(SPECIAL_TOKENS), vocab_size)})
    pad, bos, eos, unk = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token=unk)),
        pad_token=pad,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
    )


@dataclass(frozen=True)
class BenchmarkSettings:
    """What `run_benchmark` measures, and how (scripts/tools/benchmark.py's flags).

    `dtypes` may name "auto" (see `resolve_dtypes`). `compile_model` compiles our model (torch.compile) and
    leaves Marian eager. On a CPU, each of `engines` (in each of `compute_types` where it takes one) decodes
    beside ours; an engine whose library is not installed is left out. `clock`: see `interleaved_seconds`
    ("wall" only on a GPU).
    """

    size: str = "small"
    target_tokens: int = 4096
    repeats: int = 5
    new_tokens: int = 30
    generation_batch_sizes: tuple[int, ...] = (64, 1)
    generation_caches: tuple[str, ...] = ("cached", "uncached")
    dtypes: tuple[str, ...] = ("auto",)
    attn_implementations: tuple[str, ...] = ("eager", "sdpa")
    engines: tuple[str, ...] = field(default_factory=engine_names)
    compute_types: tuple[str, ...] = ("int8", "float32")
    compile_model: bool = False
    peak_seconds: float = 0.5
    clock: str = "wall"
    seed: int = 0
    device: str = "cpu"


@dataclass(frozen=True)
class TrainingWork:
    """The training batch (on the device), its labelled target tokens and the FLOPs of one training step on
    it."""

    batch: dict[str, torch.Tensor]
    labelled: int
    flops: float

    @classmethod
    def of(cls, config: VanillaTransformerConfig, batch: dict[str, torch.Tensor], device: torch.device):
        return cls(
            {key: value.to(device) for key, value in batch.items()},
            int((batch["labels"] != -100).sum()),
            training_flops(config, batch),
        )


@dataclass(frozen=True)
class Runner:
    """How every case runs: `prepare(model, attn, training)` readies a model, `timing` times it, `progress`
    counts."""

    prepare: Callable
    timing: Timing
    progress: tqdm


def run_benchmark(settings: BenchmarkSettings) -> dict:
    """Training and generation speed, MFU and peak memory of ours and Marian; see the module docstring."""
    logger.warning(RANDOM_MODELS_WARNING)
    device = torch.device(settings.device)
    if device.type != "cpu" and settings.clock != "wall":
        raise ValueError(f"clock {settings.clock!r} does not see work queued on {device}; use the wall clock")
    dtypes = resolve_dtypes(settings.dtypes, device.type)
    torch.manual_seed(settings.seed)
    config = benchmark_config(settings.size)
    ours = VanillaTransformerForConditionalGeneration(config)
    # Loaded first, so that a setting the CPU cannot run (a compute type) is named before the minutes of
    # timing.
    engines = _loaded_engines(ours, settings) if device.type == "cpu" else {}
    models = {"ours": ours.to(device), "marian": to_marian(ours).to(device)}
    work = TrainingWork.of(config, training_batch(config, settings.target_tokens, settings.seed), device)
    results = {
        "size": settings.size,
        "config": {name: getattr(config, name) for name in SIZE_FIELDS},
        "parameters": {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()},
        "environment": environment(device),
        "settings": _settings_record(settings, work, dtypes, device),
        "peak_flops": {
            dtype: matmul_peak_flops(
                getattr(torch, dtype), settings.peak_seconds, clock=settings.clock, device=device
            )
            for dtype in dtypes
        },
        "training": [],
        "generation": [],
        "engines": [],
    }
    training_cases = [(dtype, attn) for dtype in dtypes for attn in settings.attn_implementations]
    generation_cases = [
        (dtype, batch_size, num_beams, cache)
        for dtype in dtypes
        for batch_size in settings.generation_batch_sizes
        for num_beams in (1, 4)
        for cache in settings.generation_caches
    ]
    progress = tqdm(
        total=len(training_cases) + len(generation_cases), desc=f"benchmark {settings.size}", unit="case"
    )
    runner = Runner(
        functools.partial(_prepare, ours=ours, compile_model=settings.compile_model),
        Timing(settings.repeats, settings.clock, device),
        progress,
    )
    results["training"] = _training_results(models, work, results["peak_flops"], training_cases, runner)
    inputs = {
        batch_size: {k: v.to(device) for k, v in generation_inputs(config, batch_size, settings.seed).items()}
        for batch_size in settings.generation_batch_sizes
    }
    results["generation"] = _generation_results(models, inputs, generation_cases, settings.new_tokens, runner)
    progress.close()

    if engines:
        results["engines"] = _benchmark_engines(ours.float(), engines, inputs, settings.new_tokens, runner)
    return results


def _settings_record(
    settings: BenchmarkSettings, work: TrainingWork, dtypes: tuple[str, ...], device: torch.device
) -> dict:
    """The settings a report names, as measured (labelled tokens, batch size, threads, dtypes resolved)."""
    return {
        "target_tokens": work.labelled,
        "batch_size": work.batch["input_ids"].shape[0],
        "repeats": settings.repeats,
        "new_tokens": settings.new_tokens,
        "compile": settings.compile_model,
        "clock": settings.clock,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "dtypes": list(dtypes),
        "engines": list(settings.engines),
        "compute_types": list(settings.compute_types),
        "memory": "CUDA max_memory_allocated" if device.type == "cuda" else "resident set (RSS)",
        "training_flops": work.flops,
    }


def _prepare(model, attn: str, training: bool, ours, compile_model: bool):
    """`model` in train or eval mode with `attn`; ours compiled when asked (Marian stays eager)."""
    # In the "sdpa" cases ours runs what hf_vanilla trains and decodes with: torch's SDPA, or matmuls where
    # faster.
    model.set_attn_implementation(AUTO_ATTENTION if model is ours and attn == "sdpa" else attn)
    model.train(training)
    if compile_model and model is ours:
        return torch.compile(model)
    return model


def _training_results(models, work: TrainingWork, peak_flops, cases, runner: Runner) -> list[dict]:
    """Each (dtype, attention) case: target tokens/s, first step, MFU and peak memory of each model, the
    ratio."""
    results = []
    timing = runner.timing
    for dtype, attn in cases:
        steps = {
            name: make_training_step(runner.prepare(model, attn, True), work.batch, getattr(torch, dtype))
            for name, model in models.items()
        }
        first_seconds = {name: timing.once(step) for name, step in steps.items()}
        seconds = timing.interleaved(steps)
        case = {"dtype": dtype, "attn_implementation": attn}
        for name in MODEL_NAMES:
            rates = _rates(work.labelled, seconds[name])
            rates["first_step_seconds"] = first_seconds[name]  # with compilation, when compiling
            rates["mfu"] = work.flops / statistics.median(seconds[name]) / peak_flops[dtype]
            with peak_memory(timing.device) as memory:
                steps[name]()
            rates["peak_memory_bytes"] = memory.peak_bytes
            case[name] = rates
        case["ratio"] = case["ours"]["per_second"] / case["marian"]["per_second"]
        results.append(case)
        runner.progress.update()
    return results


def _generation_results(models, inputs, cases, new_tokens, runner: Runner) -> list[dict]:
    """Each (dtype, batch size, beams, cache) case: new tokens/s and peak memory of each model, the ratio."""
    results = []
    for dtype, batch_size, num_beams, cache in cases:
        # Inference runs in the model's own dtype, as users run it: weights cast once, not autocast every
        # step.
        runs = {
            name: make_generation(
                runner.prepare(model.to(getattr(torch, dtype)), "sdpa", False),
                inputs[batch_size],
                num_beams,
                cache,
                new_tokens,
            )
            for name, model in models.items()
        }
        seconds = runner.timing.interleaved(runs)
        case = {"dtype": dtype, "batch_size": batch_size, "num_beams": num_beams, "cache": cache}
        for name in MODEL_NAMES:
            case[name] = _rates(batch_size * new_tokens, seconds[name])
            with peak_memory(runner.timing.device) as memory:
                runs[name]()
            case[name]["peak_memory_bytes"] = memory.peak_bytes
        case["ratio"] = case["ours"]["per_second"] / case["marian"]["per_second"]
        results.append(case)
        runner.progress.update()
    return results


def _benchmark_engines(ours, engines: dict, inputs, new_tokens: int, runner: Runner) -> list[dict]:
    """Each shape (batch size, beams) of cached generation by ours (float32), interleaved with each engine:
    the same sentences, the same output lengths."""
    model = runner.prepare(ours, "sdpa", False)
    return [
        _engine_case(model, engines, inputs[batch_size], num_beams, new_tokens, runner.timing)
        for batch_size in inputs
        for num_beams in (1, 4)
    ]


def _engine_case(model, engines: dict, source, num_beams: int, new_tokens: int, timing: Timing) -> dict:
    """One shape: the rates of ours and a row each engine, named by `engine` and `compute_type` as
    benchmark_serving's report names them, with ours / its rate."""
    runs = {"ours": make_generation(model, source, num_beams, "cached", new_tokens)}
    for variant, engine in engines.items():
        runs[variant] = _engine_decoding(engine, source, num_beams, new_tokens)
    seconds = timing.interleaved(runs)
    batch_size = len(source["input_ids"])
    ours = _rates(batch_size * new_tokens, seconds.pop("ours"))
    rows = []
    for variant, samples in seconds.items():
        rates = _rates(batch_size * new_tokens, samples)
        ratio = ours["per_second"] / rates["per_second"]
        rows.append({"engine": variant.engine, "compute_type": variant.precision, **rates, "ratio": ratio})
    return {"batch_size": batch_size, "num_beams": num_beams, "ours": ours, "engines": rows}


def save_benchmark_model(model, directory: Path) -> Path:
    """`model` saved with `synthetic_tokenizer`: a model directory every engine loads."""
    model.save_pretrained(directory)
    synthetic_tokenizer(model.config.vocab_size).save_pretrained(directory)
    return directory


def _loaded_engines(model, settings: BenchmarkSettings) -> dict[EngineSettings, TranslationEngine]:
    """Each engine of `settings.engines` (`compared_engines`, on a CPU) loaded on `model` saved, converted
    where the engine converts, with every thread on one batch at a time as ours decodes; one whose library is
    not installed is left out."""
    engines = {}
    if not settings.engines:
        return engines
    with tempfile.TemporaryDirectory() as workdir:  # what the engines load stays in memory
        variants = compared_engines(
            settings.engines,
            settings.compute_types,
            device="cpu",
            ctranslate2_dir=Path(workdir) / "ctranslate2",
            threads=torch.get_num_threads(),
            inter_threads=1,
        )
        model_dir = save_benchmark_model(model, Path(workdir) / "model")
        for variant in variants:
            try:
                engines[variant] = load_engine(model_dir, variant)
            except MissingExtra as missing:
                logger.info("%s engine left out (%s)", variant.engine, missing)
    return engines


def _engine_decoding(
    engine: TranslationEngine, inputs: dict[str, torch.Tensor], num_beams: int, new_tokens: int
) -> Callable[[], None]:
    """The engine's decoding of `inputs`' sentences as one batch, exactly `new_tokens` tokens each."""
    batch = [
        ids[mask.bool()].tolist()
        for ids, mask in zip(inputs["input_ids"], inputs["attention_mask"], strict=True)
    ]
    options = DecodingOptions(num_beams=num_beams, max_new_tokens=new_tokens).replace(
        min_new_tokens=new_tokens
    )
    whole = Batching(max_tokens=len(batch) * max(map(len, batch)), show_progress=False)
    return functools.partial(engine.translate_encoded, batch, options, whole)


def environment(device: str | torch.device = "cpu") -> dict:
    """What the numbers depend on: library versions, the CPU (model, capability, native bf16, threads), the
    GPU."""
    device = torch.device(device)
    described = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(device),
        **cpu_description(),
        "cpus": os.cpu_count(),
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        described.update(
            gpu=properties.name,
            gpu_memory_bytes=properties.total_memory,
            gpu_capability=f"{properties.major}.{properties.minor}",
            cuda=torch.version.cuda,
            cuda_bf16=torch.cuda.is_bf16_supported(),
        )
    return described


def describe_environment(described: dict) -> str:
    """One line naming the hardware and software of a run."""
    speedup = described.get("bf16_matmul_speedup")  # absent from reports older than the probe
    bf16 = "native bf16" if described["native_bf16"] else "no native bf16"
    if speedup is not None:
        bf16 += f" at {speedup:.2f}x fp32's matmul"
    cpu = (
        f"CPU {described['cpu_model']} ({described['cpu_capability']}, {bf16}), "
        f"{described['threads']} threads"
    )
    gpu = f"GPU {described['gpu']} (CUDA {described['cuda']}); " if "gpu" in described else ""
    return f"{gpu}{cpu}; torch {described['torch']}, transformers {described['transformers']}"


def format_table(results: dict) -> str:
    """The results as aligned text: rates of ours and Marian (or of each engine) and their ratio."""
    lines = [
        describe_environment(results["environment"]),
        f"size {results['size']}: parameters ours {results['parameters']['ours']:,}, "
        f"Marian {results['parameters']['marian']:,}; "
        + ", ".join(f"matmul peak {k} {v / 1e9:.0f} GFLOP/s" for k, v in results["peak_flops"].items()),
    ]
    lines.append(
        f"{'training (target tok/s)':34} {'ours':>9} {'Marian':>9} {'ratio':>6} {'MFU ours':>9} "
        f"{'MFU Mar.':>9} {'mem ours':>9} {'mem Mar.':>9} {'1st step ours':>14}"
    )
    for case in results["training"]:
        ours, marian = case["ours"], case["marian"]
        lines.append(
            f"{case['dtype'] + ' ' + case['attn_implementation']:34} {ours['per_second']:9.0f} "
            f"{marian['per_second']:9.0f} {case['ratio']:6.2f} {ours['mfu']:9.1%} {marian['mfu']:9.1%} "
            f"{_mib(ours['peak_memory_bytes']):>9} {_mib(marian['peak_memory_bytes']):>9} "
            f"{ours['first_step_seconds']:13.2f}s"
        )
    lines.append(
        f"{'generation (new tok/s)':34} {'ours':>9} {'Marian':>9} {'ratio':>6} {'mem ours':>9} "
        f"{'mem Mar.':>9}"
    )
    for case in results["generation"]:
        name = f"{case['dtype']} batch {case['batch_size']} "
        name += "greedy" if case["num_beams"] == 1 else f"beam {case['num_beams']}"
        name += f" {case['cache']}"
        ours, marian = case["ours"], case["marian"]
        lines.append(
            f"{name:34} {ours['per_second']:9.1f} {marian['per_second']:9.1f} {case['ratio']:6.2f} "
            f"{_mib(ours['peak_memory_bytes']):>9} {_mib(marian['peak_memory_bytes']):>9}"
        )
    lines.append(
        f"{'engines (new tok/s)':22} {'engine':>12} {'compute_type':>12} {'ours':>9} {'engine':>9} "
        f"{'ratio':>6}"
    )
    for case in results["engines"]:
        shape = f"batch {case['batch_size']} {'greedy' if case['num_beams'] == 1 else 'beam 4'}"
        for row in case["engines"]:
            lines.append(
                f"{shape:22} {row['engine']:>12} {row['compute_type']:>12} {case['ours']['per_second']:9.1f} "
                f"{row['per_second']:9.1f} {row['ratio']:6.2f}"
            )
    return "\n".join(lines)


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.0f}M"


def save_results(results: dict, path: str | os.PathLike) -> Path:
    """Write the JSON atomically: a crash never leaves half a file."""
    return write_json(path, results)


__all__ = [
    "GENERATION_CACHES",
    "BenchmarkSettings",
    "PeakMemory",
    "benchmark_config",
    "describe_environment",
    "environment",
    "format_table",
    "generation_inputs",
    "interleaved_seconds",
    "matmul_peak_flops",
    "peak_memory",
    "resolve_dtypes",
    "run_benchmark",
    "save_benchmark_model",
    "save_results",
    "synchronize",
    "synthetic_tokenizer",
    "training_batch",
    "training_flops",
]
