"""Translate text line by line with a saved model: one line in, one line out, in order, any number of lines.

Reads the input (a file, compressed or not, or stdin) a chunk of lines at a time, translates each chunk in
length-sorted batches with the decoding the flags give, else the checkpoint's generation_config.json, else the
paper's (beam 4, length penalty 0.6, source length + 50; logged), and writes its translations, blank lines
kept blank, as soon as it is done. From --input FILE to --output FILE the finished chunks are committed beside
the output: the same command continues after a crash, and several processes share the chunks
(docs/translating-corpora.md).

    python scripts/translate.py outputs/multi30k-small-de-en/checkpoint_best < input.de > output.en
    python scripts/translate.py CHECKPOINT --input mono.de.gz --output mono.en --sampling --seed 1
    accelerate launch --multi_gpu --num_processes 8 scripts/translate.py CHECKPOINT --input IN --output OUT

With --rerank-with (models of the reverse direction) or --rerank-right-to-left (right-to-left models), beam
search's whole n-best list is reranked (docs/research/extras.md, "Reranking with the reverse direction").
"""

import argparse
import signal
import sys

from hf_vanilla.checkpoints.loading import decoding_for, model_digest
from hf_vanilla.cli import (
    ArgumentParser,
    add_corpus_arguments,
    add_decoding_arguments,
    add_logging_argument,
    add_model_argument,
    add_progress_argument,
    add_runtime_arguments,
    add_sampling_arguments,
    configure_logging,
    corpus_settings,
    decoding_options,
    exits_on_missing_extra,
    runtime_kwargs,
)
from hf_vanilla.evaluation.scoring import Decoder, Runtime
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.research.cli import add_research_arguments, research_decoder
from hf_vanilla.translation.corpus import (
    ChunkTranslator,
    CorpusJob,
    CorpusSettings,
    CorpusTranslationError,
    best_only,
    describe_decoding,
    engine_translator,
    process_device,
    process_state,
    translate_corpus,
)
from hf_vanilla.translation.engines import TranslationEngine, load_engine


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_model_argument(parser)
    add_decoding_arguments(parser)
    add_sampling_arguments(parser)
    add_runtime_arguments(parser)
    add_corpus_arguments(parser)
    add_research_arguments(parser)
    add_progress_argument(parser)
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped as by Ctrl-C: what is committed stays

    try:
        # Under several processes each translates on its own device.
        args.device = process_device(args.device, process_state(args.device))
        # Plain beam search without research options; a word bonus alone is refused before any model loads.
        decoder = research_decoder(args)
        runtime = Runtime(**runtime_kwargs(args), show_progress=False)
        options, _ = decoding_for(args.model, decoding_options(args))
        engine = load_engine(args.model, runtime.engine)
        translate_chunk = chunk_translator(engine, options, runtime, decoder, corpus_settings(args))
        job = corpus_job(args, options, runtime, decoder)
        translate_corpus(translate_chunk, job, show_progress=not args.quiet)
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    except KeyboardInterrupt:
        sys.exit(130)


def chunk_translator(
    engine: TranslationEngine,
    options: DecodingOptions,
    runtime: Runtime,
    decoder: Decoder,
    settings: CorpusSettings,
) -> ChunkTranslator:
    """How each chunk is translated: by the engine (n-best lists with --nbest), or by the research
    decoder's one variant (a reranking weight is one value here)."""
    if not decoder.extra_models:
        return engine_translator(engine, options, settings, runtime.batching)
    if settings.nbest > 1:
        raise CorpusTranslationError(
            "--nbest lists beam search's own translations: not with research options"
        )
    return best_only(lambda sources: decoder(engine, sources, options.settings(), runtime)[0].translations)


def corpus_job(
    args: argparse.Namespace, options: DecodingOptions, runtime: Runtime, decoder: Decoder
) -> CorpusJob:
    """The job of --input into --output, named by all that decides its translations, so that a crashed
    one continues."""
    research = {**decoder.extra_models, **decoder.weights}
    decoding = describe_decoding(
        options,
        runtime.max_tokens,
        engine=runtime.engine.engine,
        precision=runtime.engine.precision,
        **research,
    )
    fingerprint = {"model": model_digest(args.model), "decoding": decoding}
    return CorpusJob(args.input, args.output, corpus_settings(args), fingerprint)


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
