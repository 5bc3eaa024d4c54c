"""Throwaway: a small GPT-2 LM on Multi30k training targets (our joint BPE), then score the n-best lists."""
import json, sys, time, math, random, torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel
from hf_vanilla.data import load_translation_split
torch.set_num_threads(int(sys.argv[3])); torch.manual_seed(0); random.seed(0)
lang, fw = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained("/work/main/outputs/multi30k-bpe5k")
other = "de" if lang == "en" else "en"
def texts(split): return list(load_translation_split("/work/shared/datasets/multi30k", other, lang, split)["target"])
start = tok.pad_token_id
def enc(ts): return [[start] + tok(t)["input_ids"] for t in ts]
train, val = enc(texts("train")), enc(texts("validation"))
cfg = GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=256, n_layer=3, n_head=4, resid_pdrop=0.3, embd_pdrop=0.3, attn_pdrop=0.1)
model = GPT2LMHeadModel(cfg)
def batchify(seqs):
    m = max(map(len, seqs)); ids = torch.full((len(seqs), m), start); lab = torch.full((len(seqs), m), -100)
    for i, s in enumerate(seqs): ids[i, :len(s)] = torch.tensor(s); lab[i, :len(s)] = torch.tensor(s); lab[i, 0] = -100
    att = (lab != -100).long(); att[:, 0] = 1
    return ids, lab, att
def nll(seqs):
    model.eval(); tot = n = 0
    with torch.no_grad():
        for i in range(0, len(seqs), 128):
            ids, lab, att = batchify(seqs[i:i+128]); out = model(input_ids=ids, attention_mask=att, labels=lab)
            k = (lab[:, 1:] != -100).sum().item(); tot += out.loss.item() * k; n += k
    model.train(); return tot / n
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
best, t0 = 1e9, time.time()
steps_total = 0
for epoch in range(int(sys.argv[4])):
    random.shuffle(train)
    for i in range(0, len(train), 64):
        ids, lab, att = batchify(train[i:i+64])
        lr = 1e-3 * min(1, (steps_total + 1) / 400); [g.__setitem__("lr", lr) for g in opt.param_groups]
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss; loss.backward(); opt.step(); opt.zero_grad(); steps_total += 1
    v = nll(val); print(epoch, "val ppl", round(math.exp(v), 2), round(time.time() - t0), flush=True)
    if v < best: best = v; model.save_pretrained(f"/tmp/analysis/lm-{lang}")
model = GPT2LMHeadModel.from_pretrained(f"/tmp/analysis/lm-{lang}").eval()
d = json.load(open(f"/tmp/analysis/{fw}-validation-b12.json"))
hyps = [h for hs in d["nbest"] for h, _ in hs]
scores = []
with torch.no_grad():
    for i in range(0, len(hyps), 256):
        seqs = enc(hyps[i:i+256]); ids, lab, att = batchify(seqs)
        logits = model(input_ids=ids, attention_mask=att).logits.log_softmax(-1)
        lp = logits[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1); mask = lab[:, 1:] != -100
        scores += ((lp * mask).sum(1) / mask.sum(1)).tolist()
it = iter(scores); d["features"]["lm"] = [[next(it) for _ in hs] for hs in d["nbest"]]
json.dump(d, open(f"/tmp/analysis/{fw}-validation-b12-lm.json", "w")); print("scored", time.time() - t0)
