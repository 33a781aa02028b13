#!/usr/bin/env python3
"""PyTorch's columns of tools/bench's grad section (bench.c, bench_grad).

    bench_torch_attn_back.py B H T D CAUSAL THREADS RUNS

At THREADS threads (torch.set_num_threads), q, k, v and dy of shape
[B, H, T, D], f32, uniform in [-1, 1): one line
    fwd_ms F back_ms G impl sdpa|math
F the median of RUNS timed forwards of
torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL)
with q, k, v requiring gradients (what a training step runs), G the median
of RUNS timed backwards, torch.autograd.grad(out, (q, k, v), dy), each after
an untimed forward; both after at least 0.5 s of warm-up. A torch without
scaled_dot_product_attention (before 2.0, as Debian 12's 1.13) runs the
attention as its ops instead, softmax(q k^T / sqrt(D) + causal mask) v,
and says "impl math". Exits 3 with a line on stderr when torch cannot be
imported (the bench then prints "-"). A tool, not a test.
"""
import math
import statistics
import sys
import time


def main():
    if len(sys.argv) != 8:
        sys.stderr.write(__doc__)
        return 2
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means "no torch"
        sys.stderr.write(f"bench_torch_attn_back.py: no torch: {e}\n")
        return 3
    b, h, t, d, causal, threads, runs = (int(a) for a in sys.argv[1:])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    q, k, v, dy = (torch.rand(b, h, t, d) * 2 - 1 for _ in range(4))
    for x in (q, k, v):
        x.requires_grad_(True)

    sdpa = getattr(F, "scaled_dot_product_attention", None)
    mask = torch.full((t, t), float("-inf")).triu(1) if causal else None

    def forward():
        if sdpa is not None:
            return sdpa(q, k, v, is_causal=bool(causal))
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        if mask is not None:
            s = s + mask
        return torch.matmul(torch.softmax(s, dim=-1), v)

    def backward(out):
        torch.autograd.grad(out, (q, k, v), dy)

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        backward(forward())
    fwd, back = [], []
    for _ in range(runs):
        s = time.perf_counter()
        out = forward()
        fwd.append(time.perf_counter() - s)
        s = time.perf_counter()
        backward(out)
        back.append(time.perf_counter() - s)
    print(f"fwd_ms {statistics.median(fwd) * 1e3:.3f} back_ms {statistics.median(back) * 1e3:.3f} "
          f"impl {'sdpa' if sdpa is not None else 'math'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
