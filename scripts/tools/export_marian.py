"""Export a trained model directory to a stock MarianMTModel directory, and optionally to CTranslate2 beside
it."""


from transformers import MarianMTModel

from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging, exits_on_missing_extra
from hf_vanilla.extras import require
from hf_vanilla.tools.export import export_to_marian, load_vanilla, max_logit_difference
from hf_vanilla.translation.engines.ctranslate2_engine import convert_to_ctranslate2


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("model_dir", help="a saved hf_vanilla model directory")
    parser.add_argument("output_dir", help="where the MarianMTModel directory goes")
    parser.add_argument("--tokenizer", default=None, help="tokenizer directory (default: model_dir)")
    parser.add_argument(
        "--ctranslate2-output-dir",
        default=None,
        help="also convert model_dir (with its own tokenizer) to CTranslate2 here; the ctranslate2 engine "
        "(--engine ctranslate2) converts and caches on its own",
    )
    parser.add_argument(
        "--quantization", default=None, help="CTranslate2 weight type: int8, int8_float32, float32..."
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing output directories")
    add_logging_argument(parser)
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    configure_logging(args.log_level)
    if args.ctranslate2_output_dir:
        require("ctranslate2", extra="ct2")  # before the Marian export, not after it

    try:
        model, tokenizer = load_vanilla(args.model_dir)
        marian_dir = export_to_marian(model, args.output_dir, args.tokenizer or tokenizer, args.overwrite)
    except (FileExistsError, FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    difference = max_logit_difference(model, MarianMTModel.from_pretrained(marian_dir))
    print(f"saved {marian_dir}: max |logit difference| to the original on random inputs {difference:.2e}")
    if args.ctranslate2_output_dir:
        path = convert_to_ctranslate2(
            args.model_dir, args.ctranslate2_output_dir, args.quantization, args.overwrite
        )
        print(f"saved {path} (CTranslate2, {args.quantization or 'weights as saved'})")


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
