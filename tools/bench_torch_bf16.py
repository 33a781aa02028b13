#!/usr/bin/env python3
"""PyTorch's bf16 rows of tools/bench's bf16 section (bench.c, bench_matmul_bf16).

    bench_torch_bf16.py THREADS RUNS CASE...      CASE: M,N,K,matmul|linear

For each case, at THREADS threads (torch.set_num_threads), one line
    M,N,K,kind GFLOPS
the median of RUNS timed runs after a warm-up of at least 0.5 s: matmul is
torch.matmul(a [M,K], b [K,N]) with both operands bf16; linear is
nn.Linear(K, N, bias=False) in bf16 on x [M,K] bf16 (the weight [N,K], as a
bf16 checkpoint's), under torch.no_grad. Values are uniform in [-1, 1).
Exits 3 with a line on stderr when torch cannot be imported (the bench then
prints its rows without PyTorch's). A tool, not a test.
"""
import statistics
import sys
import time


def main():
    if len(sys.argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "no torch"
        sys.stderr.write(f"bench_torch_bf16.py: no torch: {e}\n")
        return 3
    threads, runs = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    for case in sys.argv[3:]:
        m, n, k, kind = case.split(",")
        m, n, k = int(m), int(n), int(k)
        with torch.no_grad():
            if kind == "linear":
                lin = torch.nn.Linear(k, n, bias=False).to(torch.bfloat16)
                lin.weight.uniform_(-1, 1)
                x = (torch.rand(m, k) * 2 - 1).to(torch.bfloat16)
                step = lambda: lin(x)  # noqa: E731
            else:
                a = (torch.rand(m, k) * 2 - 1).to(torch.bfloat16)
                b = (torch.rand(k, n) * 2 - 1).to(torch.bfloat16)
                step = lambda: torch.matmul(a, b)  # noqa: E731
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.5:
                step()
            secs = []
            for _ in range(runs):
                t = time.perf_counter()
                step()
                secs.append(time.perf_counter() - t)
        gflops = 2.0 * m * n * k / statistics.median(secs) * 1e-9
        print(f"{case} {gflops:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
