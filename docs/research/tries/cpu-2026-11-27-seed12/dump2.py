"""Throwaway: an ensemble's validation 12-best list (lp 1.0) with the package's reranking features, for crossval.py.
python dump2.py SRC TGT OUT.json --members M1 M2 ... --reverse R1 ... --r2l L1 ... --lm LM [--beam N --max-tokens T]
(a larger beam needs a smaller --max-tokens: the scores beam search keeps grow with rows = sentences x beam)"""
import argparse, json, time, torch
from hf_vanilla.data import load_translation_split
from hf_vanilla.translation import load_model_and_tokenizer, load_ensemble, translate_nbest
from hf_vanilla.reranking import load_reranking_models, reranking_features
parser = argparse.ArgumentParser()
parser.add_argument("src"); parser.add_argument("tgt"); parser.add_argument("out")
for name in ("members", "reverse", "r2l", "lm"):
    parser.add_argument(f"--{name}", nargs="+", default=[])
parser.add_argument("--beam", type=int, default=12)
parser.add_argument("--max-tokens", type=int, default=4096)
args = parser.parse_args()
torch.set_num_threads(1)
model, tok = load_model_and_tokenizer(args.members[0])
ensemble = load_ensemble(args.members[1:])
rerankers = load_reranking_models(args.reverse, args.r2l, None, "float32", args.lm)
pairs = load_translation_split("/work/shared/datasets/multi30k", args.src, args.tgt, "validation")
sources, refs = list(pairs["source"]), list(pairs["target"])
start = time.time()
nbest = translate_nbest(model, tok, sources, args.beam, ensemble=ensemble, length_penalty=1.0, max_tokens=args.max_tokens)
decoded = time.time() - start
features = reranking_features(nbest, sources, max_tokens=args.max_tokens, **rerankers)
features = {"lm" if k == "language_model_weight" else k: v for k, v in features.items()}
json.dump({"args": vars(args), "sources": sources, "refs": refs, "nbest": nbest, "features": features,
           "decode_seconds": decoded, "seconds": time.time() - start}, open(args.out, "w"))
print("done", decoded, time.time() - start)
