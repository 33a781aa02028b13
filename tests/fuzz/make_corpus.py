#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora: a few tiny valid and near-valid files.

Usage: tests/fuzz/make_corpus.py   (rewrites tests/fuzz/corpus/; stdlib only)
"""
import json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))


def npy(dict_text, data, major=1, align=64):
    pre = 10 if major == 1 else 12
    total = -(-(pre + len(dict_text) + 1) // align) * align
    head = dict_text + " " * (total - pre - len(dict_text) - 1) + "\n"
    length = struct.pack("<H" if major == 1 else "<I", len(head))
    return b"\x93NUMPY" + bytes([major, 0]) + length + head.encode() + data


def st(header, data, pad=True):
    h = json.dumps(header, separators=(",", ":")).encode() if isinstance(header, dict) else header
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def i32(*v):
    return struct.pack("<%di" % len(v), *v)


def d(dtype, shape, a, b):
    return {"dtype": dtype, "shape": shape, "data_offsets": [a, b]}


NPY = {
    "f32_2x3": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32(1, -0.0, 2.5, 3, 4, 5)),
    "i32_1d": npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", i32(1, -2, 3)),
    "f32_4d": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 1, 2), }", f32(1, 2, 3, 4)),
    "scalar": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f32(7)),
    "v2_dq": npy('{"shape": (2,), "descr": "<i4", "fortran_order": False}', i32(5, 6), major=2),
    "v3": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", f32(1), major=3),
    "f8": npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", f32(0, 0)),
    "fortran": npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f32(1, 2, 3, 4)),
    "truncated": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32(1, 2)),
    "five_dims": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1), }", f32(1)),
    "f16_2x2": npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }", f32(1, 2)),
}

ST = {
    "two": st({"a": d("F32", [2, 3], 0, 24), "b": d("I32", [2], 24, 32)}, f32(1, 2, 3, 4, 5, 6) + i32(7, 8)),
    "half": st({"h": d("F16", [2, 2], 0, 8), "b": d("BF16", [2], 8, 12)}, f32(1, 2, 3)),
    "metadata": st({"__metadata__": {"format": "pt"}, "w.weight": d("F32", [2, 2], 0, 16)}, f32(1, 2, 3, 4)),
    "scalar_gap": st({"s": d("I32", [], 4, 8), "t": d("F32", [1, 1, 1, 1], 8, 12)}, i32(0, 1, 2)),
    "empty": st({}, b""),
    "f16": st({"h": d("F16", [2], 0, 4)}, b"\0\0\0\0"),
    "overlap": st({"a": d("F32", [2], 0, 8), "b": d("F32", [2], 4, 12)}, f32(1, 2, 3)),
    "past_end": st({"a": d("F32", [4], 0, 16)}, f32(1, 2)),
    # found by fuzzing: a raw newline inside the dtype string must not reach the message
    "ctrl_dtype": st(b'{"a":{"dtype":"\nF32","shape":[2],"data_offsets":[0,8]}}', f32(1, 2)),
    # the format's rules (safetensors.c): each refused, with a message naming the field
    "nul_key": st(b'{"w_q.weight\\u0000junk":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)),
    "esc_key": st(b'{"\\u001b[31m":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)),
    "utf8_key": st('{"\u00e9\\u00e9":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'.encode(), f32(1)),
    "gap_between": st({"a": d("F32", [1], 0, 4), "b": d("F32", [1], 8, 12)}, f32(1, 2, 3)),
    "trailing": st({"a": d("F32", [1], 0, 4)}, f32(1, 2)),
    "float_shape": st(b'{"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}', f32(1, 2)),
    "exp_offset": st(b'{"w":{"dtype":"F32","shape":[10],"data_offsets":[0,4e1]}}', f32(*range(10))),
    "leading_space": st(b' {"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)),
    "bad_json": st(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]', f32(1), pad=False),
}


def write(name, files):
    out = os.path.join(HERE, "corpus", name)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    for k, v in files.items():
        with open(os.path.join(out, k), "wb") as f:
            f.write(v)


write("fuzz_npy", NPY)
write("fuzz_safetensors", ST)
