#!/usr/bin/python3
"""Writes tests/fixtures/io/: small .npy and .safetensors files for tests/test_npy.c and tests/test_safetensors.c.

Valid .npy files are written by numpy itself (np.save, np.lib.format.write_array), so
the C reader is tested against the real producer. .safetensors files are assembled by
hand from the format description (8-byte little-endian header length, JSON header
padded with spaces, data area), so that the generator runs where the `safetensors`
package is not installed; official.safetensors is written by that package when it is
importable (and kept as committed otherwise). Malformed files are assembled by hand;
each was checked to be refused by the official reader (safetensors 0.8.0).

For each valid file, `<name>.expected.f32` holds the values the C reader must return,
as raw little-endian float32 computed here by numpy (and torch for bfloat16 when it is
importable): the test reads those with fread, independent of the code under test.

Run: /usr/bin/python3 tools/gen_io_fixtures.py   (deterministic; numpy >= 1.17)
"""
import json
import os
import struct
import sys

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "io")


def path(name):
    return os.path.join(OUT, name)


def write(name, data):
    with open(path(name), "wb") as f:
        f.write(data)


def expect(name, values):
    """Raw little-endian float32 of what the reader must produce."""
    write(name + ".expected.f32", np.ascontiguousarray(values, dtype="<f4").tobytes())


def npy(name, array, version=None):
    with open(path(name), "wb") as f:
        if version is None:
            np.save(f, array)
        else:
            np.lib.format.write_array(f, array, version=version)


def npy_raw(header, data=b"", version=1, magic=b"\x93NUMPY", pad=True):
    """A .npy built by hand: header is the dict text (padded to 64 with '\\n')."""
    h = header.encode("latin1")
    pre = 10 if version == 1 else 12
    if pad:
        total = (pre + len(h) + 1 + 63) // 64 * 64
        h = h + b" " * (total - pre - len(h) - 1) + b"\n"
    if version == 1:
        return magic + bytes([1, 0]) + struct.pack("<H", len(h)) + h + data
    return magic + bytes([version, 0]) + struct.pack("<I", len(h)) + h + data


def gen_npy():
    rng = np.random.default_rng(20240611)
    a = rng.standard_normal((2, 3, 4)).astype("<f4")
    npy("f4_2x3x4.npy", a)
    expect("f4_2x3x4.npy", a)

    # float64 -> float32: round to nearest even, overflow to inf, underflow to 0, NaN.
    f8 = np.array([[0.1, 1 / 3, -2.5, 1e300, -1e300],
                   [1e-50, 1 + 2.0**-24, 1 + 3 * 2.0**-24, np.inf, -np.inf],
                   [np.nan, -0.0, 3.4028235677973366e38, 1.401298464324817e-45, 7.0e-46]],
                  dtype="<f8")
    npy("f8_3x5.npy", f8)
    with np.errstate(over="ignore"):
        expect("f8_3x5.npy", f8.astype(np.float32))

    # float16 bit patterns: subnormals, the normal range's ends, inf, NaN, -0.
    bits = np.array([0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8000,
                     0x3C00, 0xC000, 0x3555, 0x8201], dtype="<u2")
    f2 = bits.view("<f2")
    npy("f2_12.npy", f2)
    expect("f2_12.npy", f2.astype(np.float32))

    npy("f4_scalar.npy", np.array(3.25, dtype="<f4"))
    expect("f4_scalar.npy", np.array([3.25], dtype="<f4"))
    npy("f4_empty_0x3.npy", np.zeros((0, 3), dtype="<f4"))
    v = np.arange(7, dtype="<f4") * 0.5 - 1
    npy("f4_7.npy", v)
    expect("f4_7.npy", v)

    mask = np.array([[True, False, True, True, False], [False, False, True, False, True]])
    npy("b1_mask_2x5.npy", mask)
    expect("b1_mask_2x5.npy", mask.astype(np.float32))
    u1 = np.array([[0, 1, 2, 255], [1, 1, 0, 0], [7, 0, 128, 1]], dtype="|u1")
    npy("u1_3x4.npy", u1)
    expect("u1_3x4.npy", u1.astype(np.float32))

    i4 = np.array([5, 0, 17, 2**24], dtype="<i4")
    npy("i4_4.npy", i4)
    expect("i4_4.npy", i4.astype(np.float32))
    i8 = np.array([[-3, 2**24, 7], [2**40, -(2**62), 0]], dtype="<i8")
    npy("i8_2x3.npy", i8)
    expect("i8_2x3.npy", i8.astype(np.float32))
    # 2^24 + 1 has no float32: ta_npy_load refuses it, ta_npy_load_int64 reads it.
    npy("i8_inexact.npy", np.array([1, 2**24 + 1, 2**40], dtype="<i8"))

    w = rng.standard_normal((3, 2)).astype("<f4")
    npy("f4_v2.npy", w, version=(2, 0))
    expect("f4_v2.npy", w)
    npy("f4_v3.npy", w, version=(3, 0))
    expect("f4_v3.npy", w)
    # A Python 2 era header: 'L' suffixes and double quotes.
    write("f4_py2.npy", npy_raw('{"descr": "<f4", "fortran_order": False, "shape": (3L, 2L)}',
                                w.tobytes()))
    expect("f4_py2.npy", w)

    # Valid numpy files that the reader refuses.
    npy("f4_fortran.npy", np.asfortranarray(w))
    npy("f4_bigendian.npy", w.astype(">f4"))
    npy("i2.npy", np.array([1, 2, 3], dtype="<i2"))
    npy("structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    npy("f4_9d.npy", np.zeros((1,) * 9, dtype="<f4"))

    # Malformed files.
    good = np.arange(6, dtype="<f4").reshape(2, 3)
    ok_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
    write("bad_magic.npy", npy_raw(ok_header, good.tobytes(), magic=b"\x93NUMPX"))
    write("bad_version.npy", npy_raw(ok_header, good.tobytes(), version=4))
    write("truncated_data.npy", npy_raw(ok_header, good.tobytes()[:-4]))
    write("truncated_header.npy", npy_raw(ok_header, good.tobytes())[:40])
    write("truncated_preamble.npy", b"\x93NUMP")
    write("trailing_bytes.npy", npy_raw(ok_header, good.tobytes() + b"xyz"))
    write("header_too_long.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 0x7FFFFFFF) + b"{'descr'")
    write("bad_syntax.npy", npy_raw("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3), }",
                                    good.tobytes()))
    write("missing_key.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, }"))
    write("unknown_key.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), "
                                     "'extra': 1, }", good.tobytes()))
    write("duplicate_key.npy", npy_raw("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                                       "'shape': (2, 3), }", good.tobytes()))
    write("negative_dim.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }"))
    write("dim_too_big.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, "
                                     "'shape': (99999999999999999999,), }"))
    write("shape_overflow.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, "
                                        "'shape': (%d, %d), }" % (2**62, 2**62)))
    # numel fits int64 but numel * 8 bytes does not fit size_t.
    write("bytes_overflow.npy", npy_raw("{'descr': '<f8', 'fortran_order': False, "
                                        "'shape': (%d,), }" % 2**62))
    # A 4 TiB claim on a tiny file: refused before allocating.
    write("huge_truncated.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, "
                                        "'shape': (%d,), }" % 2**40, b"\0" * 16))


# ------------------------------------------------------------------ safetensors

def safetensors(tensors, metadata=None, order=None, header_override=None, extra=b""):
    """tensors: list of (name, dtype string, shape, raw bytes), data laid out in list
    order; the JSON lists keys in `order` (names) when given."""
    header, blobs, off = {}, [], 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if order is not None:
        header = {k: header[k] for k in order}
    if metadata is not None:
        header = {"__metadata__": metadata, **header}
    text = header_override if header_override is not None else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs) + extra


def bf16_to_f32(bits):
    ref = (bits.astype(np.uint32) << 16).view(np.float32)
    try:
        import torch
        t = torch.from_numpy(bits.astype(np.int16)).view(torch.bfloat16).float().numpy()
        nan = np.isnan(ref)
        assert np.array_equal(np.isnan(t), nan), "torch disagrees on bfloat16 NaNs"
        assert np.array_equal(t[~nan].view(np.uint32), ref[~nan].view(np.uint32)), \
            "torch disagrees on bfloat16 values"
    except ImportError:
        pass
    return ref


def gen_safetensors():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 3)).astype("<f4")
    f16 = np.array([0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8000, 0x3C00,
                    0xC000, 0x3555, 0x8201], dtype="<u2")
    bf16 = np.array([[0x0001, 0x007F, 0x0080, 0x7F7F], [0x7F80, 0xFF80, 0x7FC1, 0x8000],
                     [0x3F80, 0xC000, 0x3EAB, 0x8001]], dtype="<u2")
    f64 = np.array([[0.1, 1 / 3], [1e300, 1 + 3 * 2.0**-24]], dtype="<f8")
    scalar = np.array([-7.5], dtype="<f4")
    i64 = np.array([1, 2], dtype="<i8")
    tensors = [
        ("d.f64", "F64", (2, 2), f64.tobytes()),
        ("a.f32", "F32", (2, 3), a.tobytes()),
        ("f.empty", "F32", (0, 4), b""),
        ("c.bf16", "BF16", (3, 4), bf16.tobytes()),
        ("b.f16", "F16", (12,), f16.tobytes()),
        ("e.scalar", "F32", (), scalar.tobytes()),
        ("g.i64", "I64", (2,), i64.tobytes()),
    ]
    write("mixed.safetensors", safetensors(
        tensors, metadata={"format": "pt"},
        order=["c.bf16", "a.f32", "g.i64", "e.scalar", "b.f16", "f.empty", "d.f64"]))
    expect("mixed.a.f32", a)
    expect("mixed.b.f16", f16.view("<f2").astype(np.float32))
    expect("mixed.c.bf16", bf16_to_f32(bf16))
    with np.errstate(over="ignore"):
        expect("mixed.d.f64", f64.astype(np.float32))
    expect("mixed.e.scalar", scalar)
    write("empty.safetensors", safetensors([], metadata={}))

    six = np.arange(6, dtype="<f4").tobytes()
    def hdr(obj):
        return json.dumps(obj).encode()
    write("st_short.safetensors", b"\x10\x00\x00\x00\x00")
    write("st_header_beyond.safetensors", struct.pack("<Q", 1000) + b'{"a": {}}' + b" " * 7)
    write("st_bad_json.safetensors", safetensors([], header_override=b'{"a": {"dtype": "F32",'))
    write("st_not_object.safetensors", safetensors([], header_override=b"[1, 2]"))
    write("st_nul.safetensors", safetensors([], header_override=b"{}\0{}"))
    write("st_offsets_outside.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 64]}}), extra=six))
    write("st_size_mismatch.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}), extra=six[:20]))
    write("st_unknown_dtype.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "Q7", "shape": [6], "data_offsets": [0, 24]}}), extra=six))
    write("st_overlap.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
         "c": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}), extra=six))
    write("st_gap.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}), extra=six))
    write("st_trailing.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}), extra=six[:12]))
    write("st_shape_huge.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [2**62, 2**62], "data_offsets": [0, 24]}}), extra=six))
    write("st_shape_overflow.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [2**40, 2**40, 2**40], "data_offsets": [0, 24]}}),
        extra=six))
    write("st_negative_shape.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [-6], "data_offsets": [0, 24]}}), extra=six))
    write("st_missing_offsets.safetensors", safetensors([], header_override=hdr(
        {"a": {"dtype": "F32", "shape": [6]}}), extra=six))
    write("st_duplicate.safetensors", safetensors([], header_override=(
        b'{"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}, '
        b'"a": {"dtype": "F32", "shape": [3], "data_offsets": [12, 24]}}'), extra=six))
    write("st_9d.safetensors", safetensors([("a", "F32", (1,) * 8 + (6,), six)]))


def gen_official():
    """official.safetensors, written by the safetensors package itself (PyTorch
    framework, so bfloat16 is included). The package is optional: where it is not
    importable the committed file and its expectations are left as they are."""
    try:
        import torch
        from safetensors.torch import save_file
    except ImportError:
        print("safetensors/torch not importable: keeping official.safetensors", file=sys.stderr)
        return
    g = torch.Generator().manual_seed(3)
    t = {
        "fc_out.weight": torch.randn(4, 3, generator=g),
        "fc_out.bias": torch.randn(4, generator=g).to(torch.float16),
        "values.weight": torch.randn(2, 5, generator=g).to(torch.bfloat16),
        "keys.weight": torch.randn(3, 3, generator=g, dtype=torch.float64),
    }
    save_file(t, path("official.safetensors"), metadata={"format": "pt"})
    for name, v in t.items():
        expect("official." + name, v.float().numpy())


def main():
    os.makedirs(OUT, exist_ok=True)
    gen_npy()
    gen_safetensors()
    gen_official()
    print("wrote", len(os.listdir(OUT)), "files to", os.path.normpath(OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
