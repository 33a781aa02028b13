#!/usr/bin/python3
"""Writes a PyTorch module's state_dict to a safetensors file, for run-graph.

    python3 tools/export_safetensors.py IN.pt OUT.safetensors [--prefix P]

IN.pt is a torch.save file of a state_dict (or of a whole module); OUT gets
every tensor in its own dtype (float32 as F32, float16 as F16, ...), under
its state_dict name (prefixed with P if given). From Python:

    import sys; sys.path.insert(0, "tools")
    from export_safetensors import save_state_dict
    save_state_dict(torch.nn.MultiheadAttention(64, 4, batch_first=True), "mha.safetensors")

Needs only torch and numpy (no `safetensors` package). The file is the format
of huggingface/safetensors: an 8-byte little-endian header length, a JSON
header {name: {dtype, shape, data_offsets}} padded with spaces to a multiple
of 8 bytes, then the tensors' bytes, packed in header order (C order, little
endian).
"""
import argparse
import json
import struct
import sys

import torch

DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def tensor_bytes(t):
    """t's elements in C order, little endian, as bytes (any dtype, 0-D too)."""
    if sys.byteorder != "little":
        raise SystemExit("export_safetensors: a big-endian machine is not supported")
    flat = t.detach().cpu().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return flat.view(torch.uint8).numpy().tobytes()


def save_state_dict(module_or_dict, path, prefix=""):
    """Writes module.state_dict() (or a dict of tensors) to path, names prefixed."""
    sd = module_or_dict.state_dict() if hasattr(module_or_dict, "state_dict") else module_or_dict
    header, chunks, at = {}, [], 0
    for name, t in sd.items():
        if not isinstance(t, torch.Tensor):
            raise SystemExit(f"export_safetensors: '{name}' is {type(t).__name__}, not a tensor")
        if t.dtype not in DTYPES:
            raise SystemExit(f"export_safetensors: '{name}' has dtype {t.dtype}, which safetensors "
                             "does not name")
        raw = tensor_bytes(t)
        full = prefix + name
        if full in header or full == "__metadata__":
            raise SystemExit(f"export_safetensors: the name '{full}' twice (or reserved)")
        header[full] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="a torch.save file: a state_dict or a module")
    ap.add_argument("output", help="the .safetensors file to write")
    ap.add_argument("--prefix", default="", help="prepended to every name")
    a = ap.parse_args()
    try:
        obj = torch.load(a.input, map_location="cpu", weights_only=True)
    except Exception:  # a whole module needs the full unpickler: only for files you trust
        obj = torch.load(a.input, map_location="cpu", weights_only=False)
    save_state_dict(obj, a.output, a.prefix)


if __name__ == "__main__":
    main()
