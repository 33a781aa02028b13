#!/usr/bin/env bash
# tools/export_safetensors.py, the round trip docs/formats.md shows: an
# nn.MultiheadAttention's state_dict exported (also through a torch.save
# file, under a prefix), run by run-graph, its output against PyTorch's.
# Needs /usr/bin/python3 with torch and numpy; without them the test is
# skipped (exit 77), saying why: CI does not install PyTorch.
# usage: test_export.sh RUN_GRAPH CLI_CHECK SOURCE_DIR
# (GML_TEST_PYTHON names another interpreter, e.g. to see the skip.)
set -u
RG=$(realpath "$1") CHECK=$(realpath "$2") SRC=$(realpath "$3")
PY=${GML_TEST_PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ] || ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
    echo "SKIP: $PY has no torch or numpy (Debian: python3-torch python3-numpy); the exporter is not tested"
    exit 77
fi
T=$(mktemp -d /tmp/test_export.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 2
n_failed=0
check() {
    local desc=$1
    shift
    if "$@" >"$T/check.out" 2>&1; then echo "ok: $desc"; else
        n_failed=$((n_failed + 1))
        echo "FAIL: $desc: $(head -c 600 "$T/check.out")" >&2
    fi
}

check "export from Python" "$PY" - "$SRC/tools" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import torch
from export_safetensors import save_state_dict

torch.manual_seed(0)
mha = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval()
with torch.no_grad():
    mha.in_proj_bias.uniform_(-0.5, 0.5)
    mha.out_proj.bias.uniform_(-0.5, 0.5)
save_state_dict(mha, "mha.safetensors")
x = torch.randn(2, 10, 64)
np.save("x.npy", x.numpy())
out, _ = mha(x, x, x, need_weights=False)
np.save("want.npy", out.detach().numpy())
causal = torch.ones(10, 10, dtype=torch.bool).triu(1)
out, _ = mha(x, x, x, attn_mask=causal, need_weights=False)
np.save("want_causal.npy", out.detach().numpy())
# a model holding the block under a prefix, saved by torch.save
model = torch.nn.Module()
model.encoder = torch.nn.Module()
model.encoder.self_attn = mha
model.encoder.norm = torch.nn.LayerNorm(64)
torch.save(model.state_dict(), "model.pt")
EOF
check "run-graph on the export" "$RG" mha --heads 4 --weights mha.safetensors --input x.npy --output got.npy
check "... equals PyTorch" "$CHECK" close got.npy want.npy
check "causal" "$RG" mha --heads 4 --weights mha.safetensors --input x.npy --causal --output got_causal.npy
check "... equals PyTorch" "$CHECK" close got_causal.npy want_causal.npy
check "a torch.save file exported by the command line" "$PY" "$SRC/tools/export_safetensors.py" model.pt model.safetensors
check "run-graph selects the block (prefix detected)" "$RG" mha --heads 4 --weights model.safetensors --input x.npy \
    --output got2.npy
check "... equals PyTorch" "$CHECK" close got2.npy want.npy
check "--prefix encoder.self_attn" "$RG" mha --heads 4 --weights model.safetensors --prefix encoder.self_attn \
    --input x.npy --output got3.npy
check "... equals PyTorch" "$CHECK" close got3.npy want.npy
"$RG" mha --heads 4 --weights model.pt --input x.npy >out 2>err
check "the torch.save file itself is refused, naming what it is" grep -qF "a zip archive (torch.save writes one" err
[ "$n_failed" -eq 0 ]
