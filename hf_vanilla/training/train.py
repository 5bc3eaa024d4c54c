"""Training with the paper's recipe (section 5) through accelerate: CPU, one GPU, several GPUs or nodes.

Section 5.1 token batches, 5.3 Adam(0.9, 0.98, 1e-9) with lrate = d_model^-0.5 * min(step^-0.5,
step * warmup^-1.5), 5.4 dropout and label smoothing. Every value is a `TrainingConfig` field, which a
YAML file (configs/*.yaml) and command-line flags (scripts/train.py) set.

`train` loads the data, makes the run directory ready and builds the model, Adam and its schedule, then hands
them to `Trainer.run` (trainer.py), the loop, whose `Trainer._update` is one update: the global batch is
`num_processes * accumulation_steps` token batches of at most `max_tokens` padded tokens a side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
import yaml
from accelerate import Accelerator, DataLoaderConfiguration, DistributedDataParallelKwargs, PartialState
from accelerate.logging import get_logger
from accelerate.utils import (
    RNG_STATE_NAME,
    broadcast_object_list,
    parse_flag_from_env,
    set_seed,
)
from accelerate.utils import load as load_tensors
from torch.utils.data import DataLoader
from transformers import GenerationConfig, PreTrainedTokenizerBase

from hf_vanilla.checkpoints.loading import TOKENIZER_FILES, load_config, load_pretrained, load_tokenizer
from hf_vanilla.checkpoints.run_model import publish_run_model
from hf_vanilla.checkpoints.tokenizer_directory import PairsSource, train_tokenizer_on_pairs
from hf_vanilla.data.batches import (
    CleaningRules,
    TokenizedRows,
    UpdateBatchSampler,
    clean_and_tokenize,
    example_lengths,
    make_collator,
)
from hf_vanilla.data.corpus import CorpusError, load_translation_split, split_names
from hf_vanilla.data.tokenization import (
    check_tokenizer_languages,
    check_tokenizer_matches_model,
    config_kwargs_from_tokenizer,
)
from hf_vanilla.evaluation.scoring import TEST_SPLIT, bleu_metric
from hf_vanilla.extras import MissingExtra, require
from hf_vanilla.files import write_text_atomic
from hf_vanilla.model.attention_kernels import AUTO_ATTENTION
from hf_vanilla.model.configuration_vanilla import SIZE_FIELDS, VanillaTransformerConfig
from hf_vanilla.model.decoding import DecodingOptions, resolve_decoding
from hf_vanilla.model.modeling_vanilla import VanillaTransformerForConditionalGeneration
from hf_vanilla.precision import resolve_precision
from hf_vanilla.training.heldout import hold_out, write_heldout
from hf_vanilla.training.loss import training_loss_function
from hf_vanilla.training.recipes import apply_recipe, keys_left_auto
from hf_vanilla.training.run_directory import (
    AVERAGE,
    BEST,
    CONFIG_FILE,
    LAST,
    LOG_FILE,
    TRAINING_STATE,
    RunDirectoryInUse,
    acquire_lock,
    average_run_checkpoints,
    numbered_checkpoints,
    read_progress,
    recover_interrupted_save,
    remove_run,
    remove_stale_staging,
    run_traces,
    truncate_log,
)
from hf_vanilla.training.schedule import LearningRateSchedule, make_lr_scheduler, peak_learning_rate
from hf_vanilla.training.settings import TrainingConfig, TrainingError
from hf_vanilla.training.trainer import Optimization, Trainer, TrainingData, TrainingProgress, ValidationSet

logger = get_logger(__name__)  # logs on the main process only

# A checkpoint only resumes into a model whose weights have the same shapes.
SHAPE_FIELDS = (*SIZE_FIELDS, "pre_layernorm")


def train(config: TrainingConfig, resume: bool = False, overwrite_output_dir: bool = False) -> Path:
    """Train, saving checkpoints into `config.output_dir`; return that directory.

    The directory holds one run: a plain run stops if it finds any trace of another, `resume` continues it,
    `overwrite_output_dir` replaces it; while training, a lock keeps other runs out. Raises TrainingError for
    known problems (missing dataset or language, tokenizer/model mismatch, unwritable output, a NaN loss);
    nothing half-written is left.
    """
    config.check()
    if config.validation_bleu and config.validation_split:
        _check_bleu_available(config.target_lang)
    if resume and overwrite_output_dir:
        raise TrainingError("pass --resume or --overwrite-output-dir, not both")
    run_started = time.monotonic()
    output_dir = Path(config.output_dir)
    accelerator = _make_accelerator(config, output_dir)
    set_seed(config.seed)
    inputs = load_inputs(config, accelerator)
    config = inputs.config
    accelerator.gradient_accumulation_steps = max(
        1, round((config.tokens_per_update or 0) / (config.max_tokens * accelerator.num_processes))
    )
    with _run_lock(output_dir, accelerator):
        trainer = _prepare_run(config, accelerator, inputs, resume, overwrite_output_dir, run_started)
        trainer.run()
        if accelerator.is_main_process and config.average_last:
            _average_what_was_saved(config, output_dir, trainer.progress.best_step)
        if accelerator.is_main_process:
            _publish_run_model(output_dir)
        accelerator.wait_for_everyone()
        accelerator.end_training()
        logger.info("Checkpoints in %s", output_dir)
    return output_dir


def _prepare_run(
    config: TrainingConfig,
    accelerator: Accelerator,
    inputs: RunInputs,
    resume: bool,
    overwrite_output_dir: bool,
    run_started: float,
) -> Trainer:
    """The run directory made ready (`_prepare_output_dir`) and a Trainer over the model, Adam and its
    schedule, the training batches and the run's progress, new or resumed."""
    output_dir = Path(config.output_dir)
    sampler = _update_sampler(config, inputs.train_data, accelerator)
    planned_updates = _planned_updates(config, sampler)
    _prepare_output_dir(
        config, output_dir, resume, overwrite_output_dir, inputs.model_config, inputs.tokenizer, accelerator
    )
    if inputs.heldout and accelerator.is_main_process:
        logger.info(
            "Held-out pairs in %s",
            write_heldout(output_dir, inputs.heldout, config.source_lang, config.target_lang),
        )
    optimization = _optimization(config, accelerator, inputs.model_config, planned_updates)
    progress = _start_or_resume(config, accelerator, output_dir, resume)
    loader = _training_loader(config, accelerator, inputs, sampler, optimization.model)
    return Trainer(
        config=config,
        accelerator=accelerator,
        optimization=optimization,
        data=TrainingData(loader, sampler, inputs.tokenizer, inputs.validation),
        progress=progress,
        run_started=run_started,
    )


def _optimization(
    config: TrainingConfig,
    accelerator: Accelerator,
    model_config: VanillaTransformerConfig,
    planned_updates: int | None,
) -> Optimization:
    """The model, Adam and the paper's learning rate schedule (section 5.3), prepared by accelerate, and the
    label-smoothed loss (5.4) as the `compile` setting wants it."""
    model = _initial_model(config, model_config)
    model.generation_config = generation_config(config, model_config)
    optimizer = _adam(config, model, fused=accelerator.device.type == "cuda")
    schedule = LearningRateSchedule(config.warmup, config.lr_cooldown, planned_updates)
    scheduler = make_lr_scheduler(optimizer, schedule)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    loss_function, how = training_loss_function(config.compile, config.rdrop_alpha)
    logger.info("Training step (compile=%s on %s): %s", config.compile, accelerator.device.type, how)
    return Optimization(model, optimizer, scheduler, schedule, loss_function)


def _training_loader(
    config: TrainingConfig,
    accelerator: Accelerator,
    inputs: RunInputs,
    sampler: UpdateBatchSampler,
    model: torch.nn.Module,
) -> DataLoader:
    """The batches of `sampler` padded for `model`, logged with the plan (`_log_plan`).

    Not prepared by accelerate: the sampler already shards, and batches are moved to the device by the loop.
    Its own generator: drawing its base seed from the global one would shift dropout after a resume.
    Workers only pad: the sampler, and with it the order of the batches, stays in this process."""
    workers = _loader_workers(config, accelerator)
    loader = DataLoader(
        TokenizedRows(inputs.train_data),
        batch_sampler=sampler,
        collate_fn=make_collator(
            inputs.tokenizer,
            accelerator.unwrap_model(model),
            sampler.samplers[0] if sampler.shape_buckets else None,
        ),
        generator=torch.Generator(),
        num_workers=workers,
        persistent_workers=workers > 0,  # not started again each epoch
        pin_memory=accelerator.device.type == "cuda",  # the loop's copies to the GPU then need not wait
    )
    _log_plan(config, accelerator, model, sampler, workers)
    return loader


def _check_bleu_available(target_lang: str) -> None:
    """Fail before training, not at the first validation, where the target's BLEU needs a package missing
    here."""
    try:
        bleu_metric(target_lang)
    except ValueError as err:
        raise TrainingError(str(err)) from err


def _average_what_was_saved(config: TrainingConfig, output_dir: Path, best_step: int | None) -> None:
    """Average `average_last` numbered checkpoints, or all there are when the run saved fewer (a small corpus,
    a short run), saying so: the last ones, or with early stopping those around the best (update
    `best_step`)."""
    saved = len(numbered_checkpoints(output_dir))
    if saved < config.average_last:
        logger.warning(
            "average_last is %d but the run saved %d numbered checkpoints: averaging those %d",
            config.average_last,
            saved,
            saved,
        )
    around = best_step if config.early_stopping_patience else None
    count = min(saved, config.average_last)
    checkpoints = average_run_checkpoints(output_dir, count, config, around_step=around)
    logger.info("Averaged %s into %s", ", ".join(path.name for path in checkpoints), output_dir / AVERAGE)


def _publish_run_model(output_dir: Path) -> None:
    """`RUN/model` is the run's best checkpoint until selection chooses (its last where it keeps no best)."""
    chosen = output_dir / BEST if (output_dir / BEST).is_dir() else output_dir / LAST
    if chosen.is_dir():
        run_model = publish_run_model(chosen)
        logger.info("The model to use: %s (%s until selection chooses)", run_model, chosen.name)


def _log_plan(
    config: TrainingConfig,
    accelerator: Accelerator,
    model: torch.nn.Module,
    sampler: UpdateBatchSampler,
    loader_workers: int,
) -> None:
    """The model's size, what one update and one epoch hold, and who makes the batches."""
    logger.info(
        "%d parameters; %d updates an epoch of %d batches x %d processes x %d accumulation steps, "
        "<= %d tokens each; %d data loader workers a process (dataloader_workers=%s on %s)",
        sum(parameter.numel() for parameter in model.parameters()),
        sampler.updates_per_epoch,
        accelerator.gradient_accumulation_steps * accelerator.num_processes,
        accelerator.num_processes,
        accelerator.gradient_accumulation_steps,
        config.max_tokens,
        loader_workers,
        config.dataloader_workers,
        accelerator.device.type,
    )


def _loader_workers(config: TrainingConfig, accelerator: Accelerator) -> int:
    """The DataLoader worker processes of each training process: `config.dataloader_workers`, or for auto none
    on a CPU (they would take the cores the model trains on) and on a GPU up to 4 within this process's share
    of the machine's cores, one of which the process itself keeps."""
    if config.dataloader_workers != "auto":
        return int(config.dataloader_workers)
    if accelerator.device.type == "cpu":
        return 0
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # torchrun and accelerate launch set it
    return max(0, min(4, (os.cpu_count() or 1) // local_processes - 1))


@contextlib.contextmanager
def _run_lock(output_dir: Path, accelerator: Accelerator):
    """The run directory's lock, taken by the main process for the whole run; every process stops if it is
    held."""
    lock, refusal = None, None
    if accelerator.is_main_process:
        try:
            lock = acquire_lock(output_dir)
        except RunDirectoryInUse as err:
            refusal = str(err)
        except OSError as err:
            refusal = f"output_dir {output_dir} is not writable: {err.strerror or err}"
    refusal = broadcast_object_list([refusal])[0]
    if refusal:
        raise TrainingError(refusal)
    try:
        yield
    finally:
        if lock is not None:
            lock.unlink(missing_ok=True)


def _tensorboard_installed(output_dir: Path) -> bool:
    """Whether tensorboard is installed; where it is not, a warning naming its extra, and training goes on."""
    try:
        require("tensorboard", extra="tensorboard")
    except MissingExtra as missing:
        logger.warning("TensorBoard logging is off (%s); the log is in %s", missing, output_dir / LOG_FILE)
        return False
    return True


def _make_accelerator(config: TrainingConfig, output_dir: Path) -> Accelerator:
    """accelerate's Accelerator in the precision chosen for the device (`train` sets its accumulation steps
    once the config's keys left auto are filled)."""
    # The device accelerate will train on (ACCELERATE_USE_CPU, as Accelerator reads it, keeps a GPU machine on
    # CPU).
    device_type = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU")).device.type
    precision = resolve_precision(config.mixed_precision, device_type)
    accelerator = Accelerator(
        mixed_precision=precision.mixed_precision,
        # Our batches are already global per update: one scheduler step per optimizer step, not one per
        # process.
        dataloader_config=DataLoaderConfiguration(split_batches=True),
        log_with="tensorboard" if config.tensorboard and _tensorboard_installed(output_dir) else None,
        project_dir=str(output_dir),
        # A layer LayerDrop skips has no gradient, which DDP must be told to expect (auto may turn LayerDrop
        # on).
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=config.layer_dropout != 0)],
    )
    logger.info(
        "Precision %s on %s: %s; %s",
        precision.dtype_name,
        accelerator.device,
        precision.reason,
        _distributed_setup(accelerator),
    )
    return accelerator


def _distributed_setup(accelerator: Accelerator) -> str:
    """accelerate's distributed type, processes and mixed precision, with the FSDP or DeepSpeed settings when
    on."""
    setup = (
        f"accelerate {accelerator.distributed_type.value}, {accelerator.num_processes} process(es), "
        f"mixed precision {accelerator.mixed_precision}"
    )
    if (fsdp := getattr(accelerator.state, "fsdp_plugin", None)) is not None:
        if fsdp.fsdp_version == 1:
            sharding = fsdp.sharding_strategy
        else:
            sharding = f"reshard {fsdp.reshard_after_forward}"
        setup += (
            f", FSDP{fsdp.fsdp_version} ({sharding}, CPU offload {fsdp.cpu_offload}, "
            f"{fsdp.state_dict_type})"
        )
    if (deepspeed := accelerator.state.deepspeed_plugin) is not None:
        setup += (
            f", DeepSpeed ZeRO-{deepspeed.zero_stage} "
            f"(offload optimizer {deepspeed.offload_optimizer_device}, "
            f"parameters {deepspeed.offload_param_device})"
        )
    return setup


def _adam(config: TrainingConfig, model: torch.nn.Module, fused: bool) -> torch.optim.Adam:
    """Adam(0.9, 0.98, 1e-9) at the schedule's peak learning rate (section 5.3), which the scheduler scales.

    `fused` (on a GPU): one kernel for every parameter's step, which keeps its step count on the device; the
    CPU keeps the plain foreach Adam, whose arithmetic the CPU runs and tests were made with."""
    return torch.optim.Adam(
        model.parameters(),
        lr=peak_learning_rate(model.config.d_model, config.warmup, config.lr_scale, config.lr),
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
        fused=fused,
    )


def _update_sampler(config: TrainingConfig, train_data, accelerator: Accelerator) -> UpdateBatchSampler:
    shape_buckets = config.shape_buckets == "yes" or (
        config.shape_buckets == "auto" and accelerator.device.type != "cpu"
    )
    try:
        sampler = UpdateBatchSampler(
            example_lengths(train_data),
            config.max_tokens,
            accelerator.gradient_accumulation_steps,
            accelerator.num_processes,
            accelerator.process_index,
            config.seed,
            shape_buckets=shape_buckets,
        )
    except ValueError as err:
        raise TrainingError(str(err)) from err
    if sampler.shape_buckets:
        shapes = sampler.samplers[0].shapes
        logger.info(
            "Shape buckets (shape_buckets=%s on %s): %d batch shapes (rows x tokens) %s",
            config.shape_buckets,
            accelerator.device.type,
            len(shapes),
            ", ".join(f"{rows}x{length}" for rows, length in shapes),
        )
    return sampler


def _planned_updates(config: TrainingConfig, sampler: UpdateBatchSampler) -> int | None:
    """The updates the run will make, when a step or epoch budget says (the smaller when both do)."""
    budgets = [config.max_steps, config.max_epochs and config.max_epochs * sampler.updates_per_epoch]
    return min((budget for budget in budgets if budget), default=None)


def _start_or_resume(config: TrainingConfig, accelerator: Accelerator, output_dir: Path, resume: bool):
    """The run's progress, restored with the whole training state from checkpoint_last when resuming."""
    progress = TrainingProgress()
    if resume:
        state_dir = output_dir / LAST / TRAINING_STATE
        try:
            progress.load_state_dict(read_progress(state_dir))
            # accelerate loads with torch.load(weights_only=True), which refuses pickled code, but skips
            # random states it cannot load without a word: load them first, so that a bad file stops the
            # resume.
            load_tensors(state_dir / f"{RNG_STATE_NAME}_{accelerator.process_index}.pkl")
            accelerator.load_state(str(state_dir))
        except (ValueError, OSError, RuntimeError, pickle.UnpicklingError) as err:
            raise TrainingError(f"cannot resume from {state_dir}: {str(err).splitlines()[0]}") from err
        logger.info("Resumed %s at update %d", output_dir, progress.step)
    else:
        # Dropout draws differ between processes; the initial weights do not.
        set_seed(config.seed, device_specific=True)
    if accelerator.is_main_process:
        try:
            truncate_log(output_dir, progress.step)
        except ValueError as err:
            raise TrainingError(str(err)) from err
    if accelerator.log_with:
        accelerator.init_trackers("tensorboard")
    return progress


# Inputs


@dataclass(frozen=True)
class RunInputs:
    """What a run trains on, made before its run directory is touched, and its config with every key set."""

    config: TrainingConfig  # the keys left auto filled by corpus size (`with_corpus_recipe`)
    tokenizer: PreTrainedTokenizerBase
    model_config: VanillaTransformerConfig
    train_data: datasets.Dataset  # the cleaned training pairs, tokenized
    validation: ValidationSet | None
    # {split: pairs held out of training}, for the splits the dataset lacks
    heldout: dict[str, datasets.Dataset]


def load_inputs(config: TrainingConfig, state: PartialState | Accelerator) -> RunInputs:
    """The tokenizer, model config and data of a run, each process's `state` saying which process does the
    work: the main process trains the tokenizer if it is missing (one vocabulary for all), and each node's
    first process cleans and tokenizes into its datasets cache while the node's other processes wait, then
    read that cache; nodes without a shared file system thus prepare at once, not one after another."""
    with state.main_process_first():
        config = with_corpus_recipe(config)
        tokenizer = load_or_train_tokenizer(config)
    model_config = _model_config(config, tokenizer)
    with state.local_main_process_first():
        return _load_data(config, tokenizer, model_config)


def with_corpus_recipe(config: TrainingConfig) -> TrainingConfig:
    """`config` with the keys it leaves auto taken from the corpus-size table (recipes.py) by its training
    pairs, counted before any tokenizer is trained, since the table picks the vocabulary size; logged in one
    line."""
    if not keys_left_auto(config):
        return config
    train_pairs, _ = training_pairs(config)
    chosen = apply_recipe(config, len(train_pairs))
    chosen.check()
    logger.info(chosen.corpus_recipe)
    return chosen


def load_or_train_tokenizer(config: TrainingConfig) -> PreTrainedTokenizerBase:
    """The tokenizer of `init_from`, else the one at `tokenizer`, trained on the training pairs if missing;
    one learned from another language pair is refused (`check_tokenizer_languages`)."""
    if config.init_from:
        try:
            tokenizer = load_tokenizer(config.init_from)
        except (OSError, ValueError) as err:
            raise TrainingError(f"init_from {config.init_from!r}: no saved model there ({err})") from err
        if config.tokenizer and Path(config.tokenizer).exists():
            if _load_tokenizer(config.tokenizer).get_vocab() != tokenizer.get_vocab():
                raise TrainingError(
                    f"tokenizer {config.tokenizer} is not the vocabulary of init_from {config.init_from}: "
                    "leave tokenizer out (the checkpoint's own is used) or start from a matching checkpoint"
                )
        return tokenizer
    path = Path(config.tokenizer)
    if not path.exists():
        logger.info(
            "No tokenizer at %s: training one of %d tokens on %s",
            path,
            config.tokenizer_vocab_size,
            config.train_split,
        )
        train_pairs, _ = training_pairs(config)
        train_tokenizer_on_pairs(train_pairs, path, config.tokenizer_vocab_size, pairs_source(config))
    else:
        # A language the data lacks is named before the tokenizer's
        load_training_split(config, config.train_split)
    try:
        check_tokenizer_languages(path, config.source_lang, config.target_lang)
    except ValueError as err:
        raise TrainingError(str(err)) from err
    return _load_tokenizer(path)


def pairs_source(config: TrainingConfig) -> PairsSource:
    """What the run's training pairs are, for the tokenizer learned from them."""
    return PairsSource((config.source_lang, config.target_lang), config.dataset, config.train_split)


def _load_tokenizer(path) -> PreTrainedTokenizerBase:
    try:
        return load_tokenizer(path, needed_files=TOKENIZER_FILES)
    except (OSError, ValueError) as err:
        raise TrainingError(f"tokenizer {path} cannot be loaded: {err}") from err


def load_training_split(config: TrainingConfig, split: str) -> datasets.Dataset:
    """The config's dataset's `split`, a bad name or language a TrainingError in one line."""
    try:
        return load_translation_split(
            config.dataset, config.source_lang, config.target_lang, split, config.dataset_config
        )
    except CorpusError as err:
        raise TrainingError(str(err)) from err


def heldout_splits(config: TrainingConfig) -> list[str]:
    """The validation and test splits the dataset lacks, which the run holds out of its training pairs (none
    with `holdout: 0`)."""
    if config.holdout == 0:
        return []
    try:
        available = split_names(config.dataset, config.dataset_config)
    except CorpusError as err:
        raise TrainingError(str(err)) from err
    return [split for split in (config.validation_split, TEST_SPLIT) if split and split not in available]


def training_pairs(config: TrainingConfig) -> tuple[datasets.Dataset, dict[str, datasets.Dataset]]:
    """(the pairs to train on, {split: pairs held out of them} for the splits the dataset lacks)."""
    pairs = load_training_split(config, config.train_split)
    splits = heldout_splits(config)
    return hold_out(pairs, splits, config.holdout, config.seed) if splits else (pairs, {})


def _cleaned(
    config: TrainingConfig,
    pairs,
    tokenizer: PreTrainedTokenizerBase,
    name: str,
    max_length: int,
    keep_text: bool,
):
    """`pairs` tokenized and cleaned (`clean_and_tokenize`), no side longer than the model's `max_length`
    positions: the same rule for every split a run reads, so that validation, like training, never takes a
    pair of thousands of tokens. A right-to-left run learns on reversed target words
    (`config.right_to_left`)."""
    rules = CleaningRules(min(config.clean_max_tokens, max_length - 1), config.clean_max_length_ratio)
    cleaned, _ = clean_and_tokenize(
        pairs, tokenizer, rules, name, config.right_to_left, config.preprocessing_workers, keep_text
    )
    if len(cleaned) == 0:
        raise TrainingError(f"no {name} left in {config.dataset} after cleaning")
    return cleaned


def _load_data(
    config: TrainingConfig, tokenizer: PreTrainedTokenizerBase, model_config: VanillaTransformerConfig
) -> RunInputs:
    """The run's inputs: its training pairs and validation set (if any) cleaned for `model_config`'s
    positions. A right-to-left run learns and is validated on reversed target words, and scores BLEU in
    reading order, in which its model's translations come back (`config.right_to_left`)."""
    max_length = model_config.max_position_embeddings
    train_pairs, heldout = training_pairs(config)
    train_name = f"{config.train_split} pairs"
    train_data = _cleaned(config, train_pairs, tokenizer, train_name, max_length, keep_text=False)
    validation = _validation_set(config, tokenizer, heldout, max_length)
    return RunInputs(config, tokenizer, model_config, train_data, validation, heldout)


def _validation_set(
    config: TrainingConfig,
    tokenizer: PreTrainedTokenizerBase,
    heldout: dict[str, datasets.Dataset],
    max_length: int,
) -> ValidationSet | None:
    """The first `validation_max_sentences` pairs of the validation split (held out of training where the
    dataset lacks it), cleaned; None without a validation split."""
    if config.validation_split is None:
        return None
    if config.validation_split in heldout:
        pairs = heldout[config.validation_split]
    else:
        pairs = load_training_split(config, config.validation_split)
    if config.validation_max_sentences:
        pairs = pairs.select(range(min(config.validation_max_sentences, len(pairs))))
    name = f"{config.validation_split} pairs"
    tokenized = _cleaned(config, pairs, tokenizer, name, max_length, keep_text=True)
    return ValidationSet(
        tokenized, example_lengths(tokenized), list(tokenized["source"]), list(tokenized["target"])
    )


def _model_config(config: TrainingConfig, tokenizer: PreTrainedTokenizerBase) -> VanillaTransformerConfig:
    known = {field.name for field in dataclasses.fields(VanillaTransformerConfig)}
    unknown = sorted(set(config.model_overrides) - known)
    if unknown:
        raise TrainingError(f"unknown model_overrides keys {unknown}; model config fields: {sorted(known)}")
    fields = {
        **config_kwargs_from_tokenizer(tokenizer),
        "dropout": config.dropout,
        "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout,
        "layer_dropout": config.layer_dropout,
        "source_word_dropout": config.source_word_dropout,
        "target_word_dropout": config.target_word_dropout,
        "right_to_left": config.right_to_left,
        **config.model_overrides,
    }
    try:
        model_config = VanillaTransformerConfig.from_preset(config.model_preset, **fields)
        check_tokenizer_matches_model(tokenizer, model_config)
    except (TypeError, ValueError) as err:
        raise TrainingError(f"model: {err}") from err
    return model_config


def generation_config(config: TrainingConfig, model_config: VanillaTransformerConfig) -> GenerationConfig:
    """The decoding defaults a checkpoint carries: beam size and length penalty (section 6.1), special tokens.

    No output limit: the decoders stop each sentence at its source length + 50 (section 6.1), which one fixed
    number here would override (and beside which generate would warn of a max_new_tokens set by the caller); a
    plain `generate` runs to the decoder's positions (the model's `generate`). Checked now, so that a bad
    setting fails before training, not at the first save."""
    beam, _ = resolve_decoding(None, DecodingOptions(config.num_beams, config.length_penalty))
    generation = GenerationConfig(
        **beam.generate_kwargs(),
        **{
            name: getattr(model_config, name)
            for name in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
        },
    )
    try:
        generation.validate(strict=True)
    except ValueError as err:
        raise TrainingError(f"generation settings: {err}") from err
    return generation


def _initial_model(config: TrainingConfig, model_config: VanillaTransformerConfig):
    """A new model with `model_config`, or with the weights of `config.init_from` (fine-tuning), loaded and
    checked as every checkpoint is (`hf_vanilla.checkpoints.loading.load_pretrained`)."""
    if not config.init_from:
        model = VanillaTransformerForConditionalGeneration(model_config)
        model.set_attn_implementation(AUTO_ATTENTION)
        return model
    where = f"init_from {config.init_from}"
    try:
        saved = load_config(config.init_from)
        if saved.model_type != model_config.model_type:
            raise ValueError(f"holds a {saved.model_type} model, not a {model_config.model_type} one")
        _check_same_shape(saved, model_config, where)
        model = load_pretrained(config.init_from, config=model_config, attn_implementation=AUTO_ATTENTION)
    except (FileNotFoundError, ValueError) as err:
        raise TrainingError(f"{where}: {err}") from err
    logger.info("Initialized the weights from %s", config.init_from)
    return model


def _check_same_shape(saved: VanillaTransformerConfig, configured: VanillaTransformerConfig, where) -> None:
    """Raise TrainingError naming every size in which the saved model differs from the configured one."""
    differing = [name for name in SHAPE_FIELDS if getattr(saved, name) != getattr(configured, name)]
    if differing:
        raise TrainingError(
            f"{where} holds a model that differs in "
            + ", ".join(
                f"{name} ({getattr(saved, name)} saved, {getattr(configured, name)} configured)"
                for name in differing
            )
        )


def _prepare_output_dir(
    config, output_dir: Path, resume: bool, overwrite: bool, model_config, tokenizer, accelerator
) -> None:
    """Check the output directory against `resume` / `overwrite` and make it; raise TrainingError when it
    cannot serve."""
    last = output_dir / LAST
    if resume:
        if accelerator.is_main_process:
            recover_interrupted_save(output_dir)
        accelerator.wait_for_everyone()
        if not (last / TRAINING_STATE).is_dir():
            raise TrainingError(f"nothing to resume: {last / TRAINING_STATE} does not exist")
        saved = load_config(last)
        try:
            check_tokenizer_matches_model(tokenizer, saved)
        except ValueError as err:
            raise TrainingError(f"{last}: {err}") from err
        _check_same_shape(saved, model_config, last)
    else:
        traces = run_traces(output_dir)
        # Every process has looked before the main process writes: one that looked later would see this run.
        accelerator.wait_for_everyone()
        if traces and not overwrite:
            raise TrainingError(
                f"{output_dir} already holds a run ({', '.join(traces[:4])}); "
                "pass --resume to continue it or --overwrite-output-dir to replace it"
            )
        if overwrite and accelerator.is_main_process:
            remove_run(output_dir)
    if accelerator.is_main_process:
        try:
            write_text_atomic(
                output_dir / CONFIG_FILE, yaml.safe_dump(dataclasses.asdict(config), sort_keys=False)
            )
        except OSError as err:
            raise TrainingError(f"output_dir {output_dir} is not writable: {err.strerror or err}") from err
        remove_stale_staging(output_dir)
    accelerator.wait_for_everyone()
