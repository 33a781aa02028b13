#!/usr/bin/python3
"""PyTorch's side of `bench --only train`: one training step of a GPT-2-style
language model (the math of Hugging Face's GPT2LMHeadModel in plain torch:
wte + wpe, pre-LayerNorm blocks with causal attention and a GELU-tanh MLP,
ln_f, the head tied to wte), cross_entropy, backward, torch.optim.AdamW,
float32 on the CPU, as tests/fixtures/gen_train.py trains. Random weights;
the step's time does not depend on their values.

    /usr/bin/python3 tools/bench_train_torch.py --threads 2 [--vocab 4096 --d-model 512
        --heads 8 --layers 4 --batch 4 --seq 256 --runs 5]

Prints one JSON line: {"torch": version, "threads": n, "median_ms": ..., "min_ms": ...,
"runs": n}. Exits with status 3 and a message when torch cannot be imported
(bench then skips the column).
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
except ImportError as e:  # bench says so and goes on
    print(f"no torch: {e}", file=sys.stderr)
    sys.exit(3)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def block(x, p, i, H):
    B, T, D = x.shape
    hd = D // H
    ln = torch.nn.functional.layer_norm
    h = ln(x, (D,), p[f"h.{i}.ln_1.weight"], p[f"h.{i}.ln_1.bias"], 1e-5)
    qkv = torch.addmm(p[f"h.{i}.attn.c_attn.bias"], h.view(-1, D), p[f"h.{i}.attn.c_attn.weight"]).view(B, T, 3 * D)
    q, k, v = (t.view(B, T, H, hd).permute(0, 2, 1, 3) for t in qkv.split(D, dim=2))
    w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    w = torch.where(keep, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
    a = torch.matmul(torch.softmax(w, dim=-1), v).permute(0, 2, 1, 3).reshape(B * T, D)
    x = x + torch.addmm(p[f"h.{i}.attn.c_proj.bias"], a, p[f"h.{i}.attn.c_proj.weight"]).view(B, T, D)
    h = ln(x, (D,), p[f"h.{i}.ln_2.weight"], p[f"h.{i}.ln_2.bias"], 1e-5).view(-1, D)
    m = gelu_new(torch.addmm(p[f"h.{i}.mlp.c_fc.bias"], h, p[f"h.{i}.mlp.c_fc.weight"]))
    return x + torch.addmm(p[f"h.{i}.mlp.c_proj.bias"], m, p[f"h.{i}.mlp.c_proj.weight"]).view(B, T, D)


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("vocab", 4096), ("d-model", 512), ("heads", 8), ("layers", 4), ("batch", 4),
                          ("seq", 256), ("threads", 1), ("runs", 5)):
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    V, D, L, B, T = a.vocab, a.d_model, a.layers, a.batch, a.seq
    shapes = {"wte.weight": (V, D), "wpe.weight": (T, D), "ln_f.weight": (D,), "ln_f.bias": (D,)}
    for i in range(L):
        shapes.update({f"h.{i}.ln_1.weight": (D,), f"h.{i}.ln_1.bias": (D,),
                       f"h.{i}.attn.c_attn.weight": (D, 3 * D), f"h.{i}.attn.c_attn.bias": (3 * D,),
                       f"h.{i}.attn.c_proj.weight": (D, D), f"h.{i}.attn.c_proj.bias": (D,),
                       f"h.{i}.ln_2.weight": (D,), f"h.{i}.ln_2.bias": (D,),
                       f"h.{i}.mlp.c_fc.weight": (D, 4 * D), f"h.{i}.mlp.c_fc.bias": (4 * D,),
                       f"h.{i}.mlp.c_proj.weight": (4 * D, D), f"h.{i}.mlp.c_proj.bias": (D,)})
    p = {n: torch.nn.Parameter(torch.randn(*s) * 0.02 + (1.0 if n.endswith("ln_1.weight") or
                                                           n.endswith("ln_2.weight") or n == "ln_f.weight" else 0.0))
         for n, s in shapes.items()}
    opt = torch.optim.AdamW(list(p.values()), lr=3e-4)
    data = torch.randint(0, V, (B, T + 1))
    x, y = data[:, :-1], data[:, 1:]

    def step():
        opt.zero_grad()
        h = p["wte.weight"][x] + p["wpe.weight"][torch.arange(T)][None]
        for i in range(L):
            h = block(h, p, i, a.heads)
        h = torch.nn.functional.layer_norm(h, (D,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
        logits = h @ p["wte.weight"].T
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()

    step()  # warm-up: allocations, AdamW's state
    ms = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    n = len(ms)
    med = ms[n // 2] if n % 2 else (ms[n // 2 - 1] + ms[n // 2]) / 2
    print(json.dumps({"torch": torch.__version__, "threads": a.threads, "median_ms": med, "min_ms": ms[0],
                      "runs": n}))


if __name__ == "__main__":
    main()
