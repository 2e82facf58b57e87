#!/usr/bin/python3
"""Writes the PyTorch reference fixtures that tensorattn's C tests compare against.

    /usr/bin/python3 tools/gen_fixtures.py einsum     # tests/fixtures/einsum.tafx
    /usr/bin/python3 tools/gen_fixtures.py all        # every registered set
    /usr/bin/python3 tools/gen_fixtures.py --list
    /usr/bin/python3 tools/gen_fixtures.py --check all   # regenerate in memory and
                                                         # compare with the files on disk

The file format (.tafx, version 1) is described in tests/fixtures/README.md; the
writer below is its reference implementation. Output is deterministic: every case
seeds torch with its own number, so appending a case never changes the earlier ones.

Adding a fixture set: write a function `def gen_<name>(w: TafxWriter)` that adds cases
to the writer, and register it with the `@fixture_set("<name>")` decorator. Nothing
else changes; `all` picks it up and it writes tests/fixtures/<name>.tafx.

Needs only torch and numpy (Debian's python3-torch 1.13 is what the committed fixtures
were made with). The C tests never need Python: the .tafx files are committed.
"""

import argparse
import os
import re
import struct
import sys
import zlib

import numpy as np
import torch

FORMAT_MAGIC = b"TAFX"
FORMAT_VERSION = 1

# dtype codes of the format, and the numpy dtype each is stored as (little-endian).
DTYPE_CODES = {
    "f32": (1, np.dtype("<f4")),
    "f64": (2, np.dtype("<f8")),
    "i64": (3, np.dtype("<i8")),
    "u8": (4, np.dtype("u1")),      # also booleans, stored as 0 / 1
    "i32": (5, np.dtype("<i4")),
}
MAX_DIMS = 8
MAX_NAME = 4096
MAX_META = 65536

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "tests", "fixtures"))

_META_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


def format_meta(meta):
    """{'spec': 'ij,jk->ik', 'terms': 3} -> 'spec=ij,jk->ik\\nterms=3\\n' (sorted keys)."""
    lines = []
    for key in sorted(meta):
        value = meta[key]
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        value = str(value)
        if not _META_KEY.match(key):
            raise ValueError(f"metadata key {key!r} must match {_META_KEY.pattern}")
        if "\n" in value or "\0" in value:
            raise ValueError(f"metadata value for {key!r} contains a newline or NUL")
        lines.append(f"{key}={value}\n")
    return "".join(lines)


class TafxWriter:
    """Collects named records, then writes one .tafx file.

    A record is (name, metadata text, array). Cases are groups of records named
    "<case>/<role>"; a case's own metadata lives on a zero-length u8 record
    "<case>/meta" (see add_case)."""

    def __init__(self, set_name):
        self.set_name = set_name
        self.records = []
        self.names = set()

    def add(self, name, array, meta=None):
        if isinstance(array, torch.Tensor):
            array = array.detach().cpu().contiguous().numpy()
        array = np.asarray(array)
        if array.dtype == np.bool_:
            array = array.astype(np.uint8)
        for code_name, (_, dt) in DTYPE_CODES.items():
            if array.dtype == dt.newbyteorder("=") or array.dtype == dt:
                break
        else:
            raise TypeError(f"record {name}: dtype {array.dtype} is not storable")
        if name in self.names:
            raise ValueError(f"duplicate record name {name!r}")
        if not name or len(name.encode()) > MAX_NAME or "\0" in name:
            raise ValueError(f"bad record name {name!r}")
        if array.ndim > MAX_DIMS:
            raise ValueError(f"record {name}: {array.ndim} dims > {MAX_DIMS}")
        text = format_meta(meta or {})
        if len(text.encode()) > MAX_META:
            raise ValueError(f"record {name}: metadata too long")
        self.names.add(name)
        # (np.ascontiguousarray would turn a 0-dim array into shape [1])
        self.records.append((name, text, code_name, array.copy(order="C")))

    def add_case(self, case, meta):
        """The case's metadata: a zero-length u8 record named '<case>/meta'."""
        if "/" in case:
            raise ValueError(f"case name {case!r} must not contain '/'")
        self.add(f"{case}/meta", np.zeros((0,), dtype=np.uint8), meta)

    def to_bytes(self):
        out = bytearray()
        out += FORMAT_MAGIC
        out += struct.pack("<II", FORMAT_VERSION, len(self.records))
        for name, text, code_name, array in self.records:
            code, dt = DTYPE_CODES[code_name]
            nb = name.encode("utf-8")
            mb = text.encode("utf-8")
            data = array.astype(dt, copy=False).tobytes(order="C")
            out += struct.pack("<I", len(nb)) + nb
            out += struct.pack("<I", len(mb)) + mb
            out += struct.pack("<II", code, array.ndim)
            out += struct.pack(f"<{array.ndim}q", *array.shape)
            out += struct.pack("<Q", len(data))
            out += data
        out += struct.pack("<I", zlib.crc32(bytes(out)) & 0xFFFFFFFF)
        return bytes(out)


def read_tafx(data):
    """Parses .tafx bytes into [(name, meta_text, array)] (checks magic, version, CRC).
    For inspection (--dump) and for tests of the tests; the C reader is the real one."""
    if data[:4] != FORMAT_MAGIC:
        raise ValueError("not a .tafx file")
    version, count = struct.unpack_from("<II", data, 4)
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version}")
    if struct.unpack_from("<I", data, len(data) - 4)[0] != zlib.crc32(data[:-4]) & 0xFFFFFFFF:
        raise ValueError("CRC mismatch")
    by_code = {code: dt for code, dt in DTYPE_CODES.values()}
    pos, records = 12, []
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, pos); pos += 4
        name = data[pos:pos + n].decode(); pos += n
        (m,) = struct.unpack_from("<I", data, pos); pos += 4
        meta = data[pos:pos + m].decode(); pos += m
        code, ndim = struct.unpack_from("<II", data, pos); pos += 8
        shape = struct.unpack_from(f"<{ndim}q", data, pos); pos += 8 * ndim
        (nbytes,) = struct.unpack_from("<Q", data, pos); pos += 8
        arr = np.frombuffer(data[pos:pos + nbytes], dtype=by_code[code]).reshape(shape)
        pos += nbytes
        records.append((name, meta, arr))
    if pos != len(data) - 4:
        raise ValueError("stray bytes")
    return records


def write_records(records):
    """The inverse of read_tafx (bytes of a file holding these records)."""
    w = TafxWriter("")
    for name, meta, arr in records:
        w.names.add(name)
        code_name = next(k for k, (_, dt) in DTYPE_CODES.items() if arr.dtype == dt)
        w.records.append((name, meta, code_name, arr.copy(order="C")))
    return w.to_bytes()


# ------------------------------------------------------------------ registry

FIXTURE_SETS = {}


def fixture_set(name):
    def register(fn):
        FIXTURE_SETS[name] = fn
        return fn
    return register


def build_set(name):
    w = TafxWriter(name)
    w.add("_set/meta", np.zeros((0,), dtype=np.uint8), {
        "set": name,
        "format": FORMAT_VERSION,
        "generator": "tools/gen_fixtures.py",
        "torch": torch.__version__,
    })
    FIXTURE_SETS[name](w)
    return w.to_bytes()


# ------------------------------------------------------------------ einsum set

# Each case: (spec, logical operand shapes, options). Options:
#   layout=[perm or None per operand]: torch computes on a non-contiguous view whose
#     memory order is perm (outermost first): phys = randn([shape[p] for p in perm]),
#     operand = phys.permute(inverse(perm)). The stored data is the operand's values in
#     C order of its logical shape; the C test rebuilds the same strides.
#   tags=[...]: what the case exercises (for the failure report).
#   scale=s: multiply the random inputs by s.
#   error=True: torch.einsum rejects this spec/shape combination; the case records the
#     operands and torch's message, and no output.
EINSUM_CASES = [
    # --- the seed's four contractions (attention shapes, odd sizes)
    ("bhid,bhjd->bhij", [(2, 3, 17, 8), (2, 3, 13, 8)], dict(tags=["seed"])),
    ("bhij,bhjd->bhid", [(2, 3, 17, 13), (2, 3, 13, 8)], dict(tags=["seed"])),
    ("nqhd,nkhd->nhqk", [(2, 7, 4, 16), (2, 9, 4, 16)], dict(tags=["seed", "head_axis_moves"])),
    ("nhql,nlhd->nqhd", [(2, 4, 7, 9), (2, 9, 4, 16)], dict(tags=["seed", "head_axis_moves"])),
    # Q and K as the head-split views of [b, i, h, d] projections, as in the seed layer.
    ("bhid,bhjd->bhij", [(1, 2, 5, 129), (1, 2, 6, 129)],
     dict(layout=[(0, 2, 1, 3), (0, 2, 1, 3)], tags=["seed", "noncontiguous", "k129"])),
    ("bhij,bhjd->bhid", [(1, 2, 3, 257), (1, 2, 257, 5)],
     dict(layout=[None, (0, 2, 1, 3)], tags=["seed", "noncontiguous", "k257"])),
    ("bhid,bhjd->bhij", [(1, 1, 1, 1), (1, 1, 1, 1)], dict(tags=["seed", "size1"])),
    # --- matrix products
    ("ij,jk->ik", [(3, 17), (17, 5)], dict(tags=["matmul"])),
    ("ij,jk->ik", [(4, 257), (257, 3)], dict(tags=["matmul", "k257"])),
    ("ij,jk->ik", [(1, 1), (1, 1)], dict(tags=["matmul", "size1"])),
    ("ij,jk->ik", [(5, 1), (1, 6)], dict(tags=["matmul", "rank1_update"])),
    ("ij,kj->ik", [(5, 7), (6, 7)], dict(tags=["matmul", "b_transposed"])),
    ("ji,jk->ik", [(7, 5), (7, 6)], dict(tags=["matmul", "a_transposed"])),
    ("ij,jk->ki", [(4, 6), (6, 3)], dict(tags=["matmul", "out_transposed"])),
    ("ij,jk->ik", [(6, 9), (9, 4)],
     dict(layout=[(1, 0), (1, 0)], tags=["matmul", "noncontiguous"])),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 6)], dict(tags=["batched_matmul"])),
    ("bij,jk->bik", [(3, 4, 5), (5, 6)], dict(tags=["batched_matmul", "shared_b"])),
    ("ibj,bjk->bik", [(4, 3, 5), (3, 5, 2)], dict(tags=["batched_matmul", "batch_not_outer"])),
    ("bij,bjk->b", [(3, 4, 5), (3, 5, 6)], dict(tags=["batched_matmul", "reduce_output"])),
    # --- permutations and copies
    ("ij->ji", [(3, 17)], dict(tags=["transpose"])),
    ("abc->cab", [(2, 3, 4)], dict(tags=["permute"])),
    ("abcd->dbca", [(2, 3, 1, 5)], dict(layout=[(3, 1, 0, 2)], tags=["permute", "noncontiguous"])),
    ("ij->ij", [(5, 7)], dict(layout=[(1, 0)], tags=["copy", "noncontiguous"])),
    ("i->i", [(17,)], dict(tags=["copy"])),
    # --- implicit output (indices that appear once, ASCII order: upper case first)
    ("ij,jk", [(5, 4), (4, 6)], dict(tags=["implicit", "matmul"])),
    ("ba", [(3, 5)], dict(tags=["implicit", "transpose"])),
    ("ij,ij", [(3, 4), (3, 4)], dict(tags=["implicit", "full_contraction"])),
    ("aB", [(2, 3)], dict(tags=["implicit", "uppercase", "ascii_order"])),
    ("j...i", [(2, 3, 4)], dict(tags=["implicit", "ellipsis"])),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)], dict(tags=["implicit", "ellipsis", "batched_matmul"])),
    # --- ellipsis
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], dict(tags=["ellipsis", "broadcast"])),
    ("...ij,...jk->...ik", [(3, 4), (4, 2)], dict(tags=["ellipsis", "empty_ellipsis"])),
    ("i...->...", [(3, 4, 5)], dict(tags=["ellipsis", "reduce"])),
    ("i...->i", [(3, 4, 5)], dict(tags=["ellipsis", "reduce_ellipsis"])),
    ("...,...->...", [(2, 1, 3), (1, 4, 3)], dict(tags=["ellipsis", "broadcast", "hadamard"])),
    ("...ij->...ji", [(2, 3, 4)], dict(tags=["ellipsis", "transpose"])),
    ("a...b,b...->a...", [(2, 3, 4), (4, 3)], dict(tags=["ellipsis", "middle_ellipsis"])),
    ("...i,...i", [(2, 3), (3,)], dict(tags=["ellipsis", "broadcast", "implicit"])),
    ("...ii->...i", [(2, 3, 3)], dict(tags=["ellipsis", "diagonal"])),
    # --- diagonals and traces
    ("ii->i", [(5, 5)], dict(tags=["diagonal"])),
    ("ii", [(4, 4)], dict(tags=["diagonal", "trace", "implicit"])),
    ("ii->", [(17, 17)], dict(tags=["trace"])),
    ("iij->ij", [(3, 3, 2)], dict(tags=["diagonal"])),
    ("bii->bi", [(2, 4, 4)], dict(tags=["diagonal"])),
    ("iji->j", [(3, 2, 3)], dict(tags=["diagonal", "trace"])),
    ("ij,jj->ij", [(2, 3), (3, 3)], dict(tags=["diagonal", "two_operand"])),
    ("aab,bcc->ac", [(2, 2, 3), (3, 4, 4)], dict(tags=["diagonal", "two_operand"])),
    ("ii->i", [(6, 6)], dict(layout=[(1, 0)], tags=["diagonal", "noncontiguous"])),
    # --- summed indices that appear in only one operand
    ("ijk,jl->il", [(3, 4, 5), (4, 6)], dict(tags=["sum_one_operand"])),
    ("ij,kl->il", [(3, 4), (5, 6)], dict(tags=["sum_one_operand", "both_operands"])),
    ("bhid,bhjd->bh", [(2, 2, 3, 4), (2, 2, 5, 4)], dict(tags=["sum_both", "reduce_output"])),
    # --- outer, dot, Hadamard products
    ("i,j->ij", [(3,), (17,)], dict(tags=["outer"])),
    ("ij,kl->ijkl", [(2, 3), (3, 2)], dict(tags=["outer"])),
    ("ij,kl", [(2, 1), (3, 4)], dict(tags=["outer", "implicit"])),
    ("i,i->", [(257,), (257,)], dict(tags=["dot", "k257"])),
    ("i,i", [(17,), (17,)], dict(tags=["dot", "implicit"])),
    ("ij,ij->ij", [(3, 5), (3, 5)], dict(tags=["hadamard"])),
    ("ij,i->j", [(4, 3), (4,)], dict(tags=["vector_matrix"])),
    ("ij,j->i", [(5, 129), (129,)], dict(tags=["matrix_vector", "k129"])),
    # --- reductions
    ("ijk->", [(3, 4, 5)], dict(tags=["full_reduction"])),
    ("ij->i", [(3, 17)], dict(tags=["row_sum"])),
    ("ij->j", [(3, 17)], dict(tags=["column_sum"])),
    ("ijk->j", [(3, 4, 5)], dict(tags=["reduce_outer_inner"])),
    ("ijk->ki", [(3, 4, 5)], dict(layout=[(2, 0, 1)], tags=["reduce", "noncontiguous"])),
    # --- upper case, spaces, scalars
    ("IJ,JK->IK", [(3, 4), (4, 2)], dict(tags=["uppercase"])),
    ("aA,Ab->ab", [(2, 3), (3, 4)], dict(tags=["uppercase", "mixed_case"])),
    ("bHid,bHjd->bHij", [(1, 2, 3, 4), (1, 2, 5, 4)], dict(tags=["uppercase"])),
    ("i j , j k -> i k", [(2, 3), (3, 4)], dict(tags=["spaces"])),
    (" bhid , bhjd -> bhij ", [(1, 2, 3, 4), (1, 2, 5, 4)], dict(tags=["spaces", "seed"])),
    ("->", [()], dict(tags=["scalar"])),
    ("i,->i", [(5,), ()], dict(tags=["scalar", "scale"])),
    (",->", [(), ()], dict(tags=["scalar"])),
    # --- size-1 dimensions of named indices broadcast (torch 1.13 accepts this)
    ("ij,ij->ij", [(1, 3), (4, 3)], dict(tags=["broadcast_named"])),
    ("bij,bjk->bik", [(1, 2, 3), (4, 3, 5)], dict(tags=["broadcast_named", "batched_matmul"])),
    # --- empty tensors (a zero extent)
    ("ij,jk->ik", [(2, 0), (0, 3)], dict(tags=["empty", "zero_k"])),
    ("ij->", [(0, 3)], dict(tags=["empty", "full_reduction"])),
    ("bij,bjk->bik", [(0, 2, 3), (0, 3, 4)], dict(tags=["empty", "zero_batch"])),
    # --- larger values: the tolerance must scale with the magnitudes
    ("ij,jk->ik", [(3, 129), (129, 4)], dict(scale=100.0, tags=["matmul", "k129", "scaled"])),
    # --- what torch rejects (the C einsum must reject it too)
    ("ij->iij", [(2, 3)], dict(error=True, tags=["repeated_output"])),
    ("ij->k", [(2, 3)], dict(error=True, tags=["unknown_output"])),
    ("ij,jk->ik", [(2, 3), (4, 5)], dict(error=True, tags=["size_mismatch"])),
    ("ii->i", [(2, 3)], dict(error=True, tags=["diagonal_size_mismatch"])),
    ("i1->i", [(2, 3)], dict(error=True, tags=["bad_character"])),
    ("ij,jk- >ik", [(2, 3), (3, 5)], dict(error=True, tags=["bad_arrow"])),
    ("ijk->i", [(2, 3)], dict(error=True, tags=["rank_mismatch"])),
    (". ..ij->...", [(2, 3)], dict(error=True, tags=["broken_ellipsis"])),
    ("ij,jk->ik", [(2, 3)], dict(error=True, tags=["too_few_operands"], nops=1)),
]

EPS32 = 2.0 ** -24  # unit roundoff of float32


def _inverse(perm):
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    return inv


def _make_operand(shape, layout, scale):
    """float32 N(0,1)*scale of logical `shape`, laid out in memory in `layout` order."""
    if layout is None:
        return torch.randn(*shape, dtype=torch.float32) * scale if shape else \
            torch.randn((), dtype=torch.float32) * scale
    phys = torch.randn(*[shape[p] for p in layout], dtype=torch.float32) * scale
    return phys.permute(*_inverse(layout))


@fixture_set("einsum")
def gen_einsum(w):
    """Cases 'case000'.. with records meta, a, [b], out (f64), absout (f64).

    out    = einsum(spec, a.double(), b.double()): the float64 answer for the float32
             inputs, against which the C float32 result is compared;
    absout = einsum(spec, |a|, |b|) in float64: sum of |terms| per output element, for
             the error bound |c - out| <= 1e-5 + 2 * terms * 2^-24 * absout;
    terms  = the most products summed into one output element (meta)."""
    worst = 0.0
    for idx, (spec, shapes, opt) in enumerate(EINSUM_CASES):
        case = f"case{idx:03d}"
        torch.manual_seed(1000 + idx)
        layouts = opt.get("layout", [None] * len(shapes))
        scale = float(opt.get("scale", 1.0))
        ops = [_make_operand(s, l, scale) for s, l in zip(shapes, layouts)]
        meta = {"spec": spec, "nops": opt.get("nops", len(ops)),
                "tags": opt.get("tags", []), "seed": 1000 + idx}
        roles = ["a", "b"]
        if opt.get("error"):
            try:
                torch.einsum(spec, *ops)
            except (RuntimeError, ValueError) as e:
                meta["expect"] = "error"
                meta["torch_error"] = str(e).splitlines()[0]
            else:
                raise SystemExit(f"{case}: torch accepted {spec!r} {shapes}, expected an error")
            w.add_case(case, meta)
            for role, x in zip(roles, ops):
                w.add(f"{case}/{role}", x)
            continue
        try:
            out64 = torch.einsum(spec, *[x.double() for x in ops])
        except RuntimeError as e:
            raise SystemExit(f"{case}: torch 1.13 rejects {spec!r} {shapes}: {e}")
        abs64 = torch.einsum(spec, *[x.double().abs() for x in ops])
        ones = torch.einsum(spec, *[torch.ones_like(x, dtype=torch.float64) for x in ops])
        terms = int(ones.max().item()) if ones.numel() else 0
        # The bound must hold for torch's own float32 result, or it is not a bound.
        out32 = torch.einsum(spec, *ops).double()
        tol = 1e-5 + 2.0 * max(terms, 1) * EPS32 * abs64
        if out32.numel():
            ratio = ((out32 - out64).abs() / tol).max().item()
            worst = max(worst, ratio)
            if ratio > 1.0:
                raise SystemExit(f"{case}: torch float32 misses the bound ({ratio:.3f})")
        meta.update({"terms": terms, "expect": "ok"})
        w.add_case(case, meta)
        for role, x, layout in zip(roles, ops, layouts):
            m = {"layout": layout} if layout is not None else {}
            w.add(f"{case}/{role}", x.contiguous(), m)
        w.add(f"{case}/out", out64)
        w.add(f"{case}/absout", abs64)
    print(f"einsum: {len(EINSUM_CASES)} cases; torch float32 uses at most "
          f"{worst:.4f} of the error bound", file=sys.stderr)


fixture_set("layers")(__import__("fixtures_layers").gen_layers)  # tools/fixtures_layers.py


fixture_set("sdpa")(__import__("fixtures_sdpa").gen_sdpa)  # tools/fixtures_sdpa.py
fixture_set("sdpa_grad")(__import__("fixtures_sdpa_grad").gen_sdpa_grad)  # tools/fixtures_sdpa_grad.py
fixture_set("varlen")(__import__("fixtures_varlen").gen_varlen)  # tools/fixtures_varlen.py
fixture_set("half")(__import__("fixtures_half").gen_half)  # tools/fixtures_half.py

fixture_set("layers_grad")(__import__("fixtures_layers_grad").gen_layers_grad)  # tools/fixtures_layers_grad.py
fixture_set("sdpa_variants")(__import__("fixtures_variants").gen_sdpa_variants)  # tools/fixtures_variants.py

fixture_set("kvcache")(__import__("fixtures_kvcache").gen_kvcache)  # tools/fixtures_kvcache.py

# ------------------------------------------------------------------ main

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sets", nargs="*", help="set names, or 'all'")
    p.add_argument("--out-dir", default=DEFAULT_OUT)
    p.add_argument("--list", action="store_true", help="list the sets and exit")
    p.add_argument("--dump", metavar="FILE", help="print a .tafx file's records and exit")
    p.add_argument("--check", action="store_true",
                   help="regenerate in memory and fail if a file on disk differs")
    args = p.parse_args(argv)
    if args.dump:
        with open(args.dump, "rb") as f:
            for name, meta, arr in read_tafx(f.read()):
                info = meta.strip().replace("\n", "; ")
                print(f"{name:24s} {str(arr.dtype):8s} {list(arr.shape)!s:20s} {info}")
        return 0
    if args.list:
        for name in FIXTURE_SETS:
            print(name)
        return 0
    if not args.sets:
        p.error("name a set (or 'all'); --list shows them")
    names = list(FIXTURE_SETS) if "all" in args.sets else args.sets
    for name in names:
        if name not in FIXTURE_SETS:
            p.error(f"unknown set {name!r}; known: {', '.join(FIXTURE_SETS)}")
    torch.set_num_threads(1)  # the float64 references do not depend on thread splits
    status = 0
    os.makedirs(args.out_dir, exist_ok=True)
    for name in names:
        data = build_set(name)
        path = os.path.join(args.out_dir, f"{name}.tafx")
        if args.check:
            try:
                with open(path, "rb") as f:
                    same = f.read() == data
            except OSError:
                same = False
            print(f"{path}: {'up to date' if same else 'DIFFERS'}")
            status |= 0 if same else 1
            continue
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        print(f"wrote {path} ({len(data)} bytes)")
    return status


if __name__ == "__main__":
    sys.exit(main())
