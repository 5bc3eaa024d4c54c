import json, sys, itertools, sacrebleu
fw, bonus_list = sys.argv[1], [float(x) for x in sys.argv[2].split(",")]
d = json.load(open(f"/tmp/analysis/{fw}-validation-b12-lm.json"))
refs, nbest, F = d["refs"], d["nbest"], d["features"]
rev, r2l, lm = F["rerank_weight"], F["right_to_left_weight"], F["lm"]
def lc_bleu(hyps): return sacrebleu.corpus_bleu([h.lower() for h in hyps], [[r.lower() for r in refs]]).score
W = [0, 0.1, 0.2, 0.3, 0.5, 1, 1.5, 2]
for wl in [float(x) for x in sys.argv[3].split(",")]:
    for wb in bonus_list:
        r = {}
        for a, b in itertools.product(W, W):
            out = []
            for i, hyps in enumerate(nbest):
                t = [hyps[k][1] + a * rev[i][k] + b * r2l[i][k] + wl * lm[i][k] + wb * len(hyps[k][0].split()) for k in range(len(hyps))]
                out.append(hyps[max(range(len(t)), key=t.__getitem__)][0])
            r[(a, b)] = lc_bleu(out)
        bb = max(r, key=r.get); print("lm", wl, "bonus", wb, bb, round(r[bb], 2), flush=True)
