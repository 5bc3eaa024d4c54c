"""Throwaway: dump a direction's validation n-best list (ensemble, beam B, lp 1.0) and its reranking features."""
import json, sys, time, torch
from hf_vanilla.data import load_translation_split
from hf_vanilla.translation import load_model_and_tokenizer, load_ensemble, translate_nbest
from hf_vanilla.reranking import load_reranking_models, reranking_features
torch.set_num_threads(1)
src, tgt, beam, split = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
R = "/work/main/outputs/multi30k-best-recipe"
fw, bw = f"{src}-{tgt}", f"{tgt}-{src}"
runs = {"en-de": ("en-de-seed2", ["en-de-seed2", "en-de-seed3"], "en-de-r2l-seed6"),
        "de-en": ("de-en-seed4", ["de-en-seed4", "de-en-seed5"], "de-en-r2l-seed6")}
t, s, r2l = runs[fw]
bt, bs, _ = runs[bw]
model, tok = load_model_and_tokenizer(f"{R}/teachers/{t}/checkpoint_average")
ens = load_ensemble([f"{R}/students/{x}/checkpoint_average" for x in s])
rr = load_reranking_models([f"{R}/teachers/{bt}/checkpoint_average"] + [f"{R}/students/{x}/checkpoint_average" for x in bs],
                           [f"{R}/students/{r2l}/checkpoint_average"], None, "float32")
pairs = load_translation_split("/work/shared/datasets/multi30k", src, tgt, split)
sources, refs = list(pairs["source"]), list(pairs["target"])
t0 = time.time()
nbest = translate_nbest(model, tok, sources, beam, ensemble=ens, length_penalty=1.0)
feats = reranking_features(nbest, sources, **rr)
lens = [[len(tok(h, add_special_tokens=True)["input_ids"]) for h, _ in hyps] for hyps in nbest]
json.dump({"sources": sources, "refs": refs, "nbest": nbest, "features": feats, "target_token_lengths": lens,
           "seconds": time.time() - t0}, open(f"/tmp/analysis/{fw}-{split}-b{beam}.json", "w"))
print("done", time.time() - t0)
