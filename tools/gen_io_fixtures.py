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
`<name>.expected.f16` and `.expected.bf16` hold, as raw little-endian bit patterns, what
reading into TA_F16 / TA_BF16 must give: numpy's float16 rounding, torch's bfloat16
rounding (torch 1.13, Debian's python3-torch; without torch the committed files stay),
and for float64 sources an exact rounding done here with fractions (torch rounds a double
to bfloat16 through float32, i.e. twice), checked against numpy's for float16.

Run: /usr/bin/python3 tools/gen_io_fixtures.py   (deterministic; numpy >= 1.17)
"""
import json
import math
import os
import struct
import sys
from fractions import Fraction

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


def exact_round(x, mb, eb):
    """The float16 (mb 10, eb 5) / bfloat16 (mb 7, eb 8) bit pattern nearest to the double
    x (not NaN), ties to even, in exact rational arithmetic; past the largest finite: inf."""
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    inf = ((1 << eb) - 1) << mb
    if math.isinf(x):
        return sign | inf
    a = Fraction(abs(x))
    if a == 0:
        return sign
    emin = 2 - (1 << (eb - 1))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, emin)
    q = a / Fraction(2) ** (e - mb)  # the significand in units of the last place
    n = math.floor(q)
    if q - n > Fraction(1, 2) or (q - n == Fraction(1, 2) and n % 2 == 1):
        n += 1
    bits = ((e - emin) << mb) + n  # a normal n carries the implicit bit into the exponent
    return sign | min(bits, inf)


def exact_bits(values, dtype):
    mb, eb = (10, 5) if dtype == "f16" else (7, 8)
    return np.array([exact_round(float(v), mb, eb) for v in values.ravel()], dtype="<u2")


def expect_bits(name, suffix, bits):
    """Raw little-endian bit patterns of what reading into TA_F16 / TA_BF16 must give
    (None: torch is missing, the committed file stays)."""
    if bits is None:
        print("torch not importable: keeping", name + ".expected." + suffix, file=sys.stderr)
        return
    write(name + ".expected." + suffix, np.ascontiguousarray(bits, dtype="<u2").tobytes())


def f16_bits(values):
    """numpy's float16 rounding (float32 or float64 input, rounded once), as bits."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values).astype("<f2").view("<u2")


def torch_bf16_bits(values32):
    """torch's float32 -> bfloat16 rounding as bits, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    t = torch.from_numpy(np.ascontiguousarray(values32, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view("<u2")


def torch_f16_bits(values32):
    """torch's float32 -> float16 rounding as bits (checked against numpy's)."""
    bits = f16_bits(np.asarray(values32, dtype=np.float32))
    try:
        import torch
        t = torch.from_numpy(np.ascontiguousarray(values32, dtype=np.float32)).to(torch.float16)
        tb = t.view(torch.int16).numpy().view("<u2")
        nan = np.isnan(np.asarray(values32, dtype=np.float32)).ravel()
        assert np.array_equal(tb.ravel()[~nan], bits.ravel()[~nan]), "torch and numpy disagree on float16"
    except ImportError:
        pass
    return bits


def rounding_values():
    """float32 values around both half types' ties, edges and a few random ones (quiet
    positive NaN only: torch makes every NaN 0x7fc0)."""
    v = [1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-11 + 2.0**-23, 1 + 2.0**-11 - 2.0**-24,
         1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-23, 65504, 65519, 65520, 65536,
         -65520, 3.0e38, 3.4e38, 2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-26, 2.0**-133,
         2.0**-134, 1.5 * 2.0**-134, 2.0**-149, 0.1, -2.5, 1 / 3, 0.0, -0.0, np.inf, -np.inf,
         np.nan]
    rng = np.random.default_rng(11)
    v += list(rng.standard_normal(34) * 10.0 ** rng.integers(-6, 6, 34))
    return np.array(v, dtype="<f4")


def gen_npy_dtypes():
    """Files for ta_npy_load_dtype and ta_npy_save with TA_F16 / TA_BF16 / TA_F64."""
    bits = np.array([0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8000,
                     0x3C00, 0xC000, 0x3555, 0x8201], dtype="<u2")
    expect_bits("f2_12.npy", "f16", bits)  # into float16: the file's own bits
    expect_bits("f2_12.npy", "bf16", torch_bf16_bits(bits.view("<f2").astype(np.float32)))

    f4 = rounding_values().reshape(8, 8)
    npy("f4_round.npy", f4)
    expect_bits("f4_round.npy", "f16", torch_f16_bits(f4))
    expect_bits("f4_round.npy", "bf16", torch_bf16_bits(f4))

    # doubles beside the ties of both types: rounding through float32 would make them
    # ties and round them the other way
    ties = []
    for m in (10, 7):
        for k in range(1, 8):
            t = 1 + (2 * k - 1) * 2.0**-(m + 1)
            ties += [t + 2.0**-40, t - 2.0**-40, -(t + 2.0**-45), t * 2.0**-9]
    f8 = np.array(ties + [1e300, -1e-300, 65519.999999, 65520.0000001, 2.0**-25 + 2.0**-60,
                          0.1, 1 / 3, np.inf, np.nan], dtype="<f8")
    npy("f8_round.npy", f8)
    e16 = exact_bits(np.nan_to_num(f8, nan=0.0), "f16")
    e16[np.isnan(f8)] = 0x7E00
    assert np.array_equal(e16, f16_bits(f8)), "numpy's float64 -> float16 is not exact"
    expect_bits("f8_round.npy", "f16", e16)
    eb = exact_bits(np.nan_to_num(f8, nan=0.0), "bf16")
    eb[np.isnan(f8)] = 0x7FC0
    expect_bits("f8_round.npy", "bf16", eb)

    # integers: exact in float32, then rounded once (2^24 overflows float16)
    expect_bits("i4_4.npy", "f16", f16_bits(np.array([5, 0, 17, 2**24], dtype=np.float32)))

    # ta_npy_save of a bfloat16 tensor writes '<f4' exactly: numpy's file of the widened
    # values, and the bits the test builds the tensor from
    b = torch_bf16_bits(np.delete(rounding_values(), 29).reshape(7, 9))  # no NaN
    if b is not None:
        npy("bf16_save.npy", (b.astype(np.uint32) << 16).view("<f4"))
        expect_bits("bf16_save.npy", "bf16", b)


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
    # A NUL byte inside a string of the header: read as a C string, '<f4\0x' was '<f4'
    # (and a key 'descr\0x' was 'descr'); numpy refuses both.
    write("nul_in_descr.npy", npy_raw("{'descr': '<f4\0x', 'fortran_order': False, 'shape': (2, 3), }",
                                      good.tobytes()))
    write("nul_in_key.npy", npy_raw("{'descr\0x': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                    good.tobytes()))
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
    # data_bytes = 2^64 - 8: the header's offset plus it wraps past 2^64 (a fuzzer's find:
    # the float32 result, 2^63 bytes, was allocated before the size check caught it).
    write("wrap_truncated.npy", npy_raw("{'descr': '<f8', 'fortran_order': False, "
                                        "'shape': (%d,), }" % (2**61 - 1), b"\0" * 16))


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


def gen_safetensors_dtypes():
    """dtypes.safetensors: one tensor of each readable float dtype, made by torch (the
    safetensors package is not needed: the file is assembled as above), with what
    ta_safetensors_get_dtype must give for TA_F32, TA_F16 and TA_BF16."""
    try:
        import torch
    except ImportError:
        print("torch not importable: keeping dtypes.safetensors", file=sys.stderr)
        return
    g = torch.Generator().manual_seed(5)
    r = rounding_values()
    h = torch.randn(3, 4, generator=g).to(torch.float16)
    h[0, 0], h[0, 1], h[0, 2] = float("inf"), 2.0**-24, -0.0  # a subnormal, -0
    b = (torch.randn(2, 5, generator=g) * 1e-3).to(torch.bfloat16)
    b[1, 4] = 2.0**-130  # a bfloat16 subnormal
    f = torch.from_numpy(r[r == r][:24].reshape(2, 3, 4).copy())  # no NaN
    d64 = np.array([1 + 2.0**-11 + 2.0**-40, -(1 + 2.0**-8 + 2.0**-40), 1e300, 2.0**-1074,
                    0.1, 65519.99], dtype="<f8")
    raw = lambda t: t.contiguous().view(torch.int16).numpy().view("<u2")
    tensors = [("h.f16", "F16", (3, 4), raw(h).tobytes()),
               ("b.bf16", "BF16", (2, 5), raw(b).tobytes()),
               ("f.f32", "F32", (2, 3, 4), f.numpy().astype("<f4").tobytes()),
               ("d.f64", "F64", (6,), d64.tobytes())]
    write("dtypes.safetensors", safetensors(tensors, metadata={"format": "pt"}))
    for name, t in (("h.f16", h), ("b.bf16", b), ("f.f32", f)):
        expect("dtypes." + name, t.float().numpy())
        expect_bits("dtypes." + name, "f16", raw(t.float().to(torch.float16)))
        expect_bits("dtypes." + name, "bf16", raw(t.float().to(torch.bfloat16)))
    with np.errstate(over="ignore"):
        expect("dtypes.d.f64", d64.astype(np.float32))
    expect_bits("dtypes.d.f64", "f16", exact_bits(d64, "f16"))
    expect_bits("dtypes.d.f64", "bf16", exact_bits(d64, "bf16"))


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
    gen_npy_dtypes()
    gen_safetensors()
    gen_safetensors_dtypes()
    gen_official()
    print("wrote", len(os.listdir(OUT)), "files to", os.path.normpath(OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
