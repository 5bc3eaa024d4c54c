"""Usage: tf_batching.py THREADS CHECKPOINT MULTI30K OUTPUT.json

How batch shape changes transformers' beam-search speed on CPU (one thread): arrival chunks vs sorted sub-batches."""
import json, sys, time
import torch
from datasets import load_dataset
from hf_vanilla.checkpoints import load_model_and_tokenizer
from hf_vanilla.translation import DecodingOptions, translate_sentences

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
model, tok = load_model_and_tokenizer(sys.argv[2])
src = [r["translation"]["de"] for r in load_dataset(sys.argv[3], split="test")][:400]
out = {}
def run(name, chunk, max_tokens):
    opts = DecodingOptions(num_beams=4, length_penalty=0.6, max_tokens=max_tokens, show_progress=False)
    t = time.perf_counter()
    for i in range(0, len(src), chunk):
        translate_sentences(model, tok, src[i:i + chunk], opts)
    out[name] = round(len(src) / (time.perf_counter() - t), 2); print(name, out[name], flush=True)
for chunk in (len(src), 32, 64):
    for mt in (4096, 512, 256, 128):
        run(f"chunk {chunk}, max_tokens {mt}", chunk, mt)
json.dump(out, open(sys.argv[4], "w"), indent=1)
