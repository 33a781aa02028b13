#!/usr/bin/env python3
"""Fits the polynomial G of gelu's vector erfc (ops/vunary.h, GML_VGELU_G*).

erfc(a) = exp(-a^2) t G(t - TC), t = K / (K + a), a = |x| / sqrt 2 in
[0, AMAX]: G is a least-squares fit, in relative error, of erfc(a) exp(a^2) /
t on Chebyshev nodes of t, solved with mpmath at 40 digits, then rounded to
double. Prints the #defines and the fit's largest relative error (the
polynomial evaluated in double by Horner, as the kernels do). Needs mpmath
and numpy; not run by the build or the tests.

    python3 tools/fit_vgelu_erfc.py [K AMAX DEGREE]   (default 4 10.5 16)
"""
import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 40
K = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
AMAX = float(sys.argv[2]) if len(sys.argv) > 2 else 10.5
DEG = int(sys.argv[3]) if len(sys.argv) > 3 else 16
NODES = 400

t0, t1 = K / (K + AMAX), 1.0
c, h = (t0 + t1) / 2, (t1 - t0) / 2  # c: a double, TC


def g(t):
    a = K / t - K
    return mp.erfc(a) * mp.exp(a * a) / t


nodes = [c + h * mp.cos(mp.pi * (i + 0.5) / NODES) for i in range(NODES)]
A = mp.matrix(NODES, DEG + 1)
b = mp.matrix(NODES, 1)
for i, t in enumerate(nodes):
    gv = g(t)
    for j in range(DEG + 1):
        A[i, j] = (t - c) ** j / gv
    b[i] = 1
sol, _ = mp.qr_solve(A, b)
coef = [float(sol[j]) for j in range(DEG + 1)]

worst = 0.0
for t in np.linspace(t0, t1, 3001):
    p = 0.0
    for cc in reversed(coef):
        p = p * (t - c) + cc
    worst = max(worst, abs(p / float(g(mp.mpf(t))) - 1))

print("#define GML_VGELU_K %r" % K)
print("#define GML_VGELU_AMAX %r" % AMAX)
print("#define GML_VGELU_TC %s /* %r */" % (float.hex(c), c))
for j, cc in enumerate(coef):
    print("#define GML_VGELU_G%d %s" % (j, float.hex(cc)))
print("/* largest relative error of G in double: %.3e */" % worst)
