/* ta-test: all-isas -- ta_einsum / ta_einsum1 against torch.einsum (fixtures).
 *
 * Every case of tests/fixtures/einsum.tafx (written by tools/gen_fixtures.py with
 * torch 1.13) runs on four operand layouts: contiguous; permuted in memory (the
 * layout torch itself used, from the record's "layout" metadata, else reversed axes);
 * gapped (every stride padded, inner stride 2, gaps filled with NaN, output written
 * into a gapped, NaN-filled tensor whose gaps must stay untouched); and negative
 * strides (last input axis reversed, output's first axis reversed). Each result is
 * compared with torch's float64 answer for the same float32 inputs, element by
 * element, within
 *     |c - out| <= 1e-5 + 2 * terms * 2^-24 * absout,
 * where absout = einsum(|a|, |b|) in float64 and terms = the most products summed
 * into one element: the classic gamma_n bound for summing n float32 products in any
 * order, so it never flakes, yet a missing or extra term (O(|a||b|)) always fails.
 * Cases that torch rejects must be rejected too, with outputs untouched.
 * The reader itself is checked on truncated and corrupted copies of the file. */
#include "ta_test.h"
#include "fixtures.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define EPS32 (1.0 / 16777216.0)

enum variant { V_CONTIGUOUS, V_PERMUTED, V_GAPPED, V_NEGATIVE, V_COUNT };
static const char *const variant_names[V_COUNT] = {"contiguous", "permuted", "gapped",
                                                   "negative-stride"};

/* A strided float32 tensor over its own buffer (span elements). */
typedef struct strided {
    ta_tensor view;
    float *buf;
    int64_t span;
} strided;

static void strided_free(strided *s)
{
    free(s->buf);
    s->buf = NULL;
}

/* Advances a row-major multi-index; returns 0 after the last one. */
static int next_index(int ndim, const int64_t *shape, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

static int64_t offset_of(const ta_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
    return off;
}

/* Lays out shape in a fresh buffer per variant (perm: memory order of the dims,
 * outermost first, for V_PERMUTED; reverse_dim: the axis given a negative stride for
 * V_NEGATIVE, -1 for none). Gaps are NaN. Returns 0 on allocation failure. */
static int make_layout(strided *s, int ndim, const int64_t *shape, enum variant v,
                       const int64_t *perm, int reverse_dim)
{
    int64_t stride[TA_MAX_DIMS], span = 1, base = 0;
    int empty = 0;
    for (int d = 0; d < ndim; d++) empty |= shape[d] == 0;
    if (v == V_PERMUTED) {
        int64_t acc = 1;
        for (int k = ndim - 1; k >= 0; k--) {
            stride[perm[k]] = acc;
            acc *= shape[perm[k]] ? shape[perm[k]] : 1;
        }
        span = acc;
    } else if (v == V_GAPPED) {
        int64_t acc = 2; /* inner stride 2: every other element is a gap */
        for (int d = ndim - 1; d >= 0; d--) {
            stride[d] = acc;
            acc *= (shape[d] ? shape[d] : 1) + 1; /* one gap slot per dim */
        }
        span = acc + 1;
    } else {
        int64_t acc = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            stride[d] = acc;
            acc *= shape[d] ? shape[d] : 1;
        }
        span = acc;
        if (v == V_NEGATIVE && reverse_dim >= 0 && !empty) {
            base = (shape[reverse_dim] - 1) * stride[reverse_dim];
            stride[reverse_dim] = -stride[reverse_dim];
        }
    }
    s->span = span;
    s->buf = malloc((size_t)span * sizeof(float));
    if (!s->buf) return 0;
    for (int64_t i = 0; i < span; i++) s->buf[i] = NAN;
    if (ta_tensor_from_buffer(&s->view, s->buf + base, ndim, shape, stride) != TA_OK) return 0;
    return 1;
}

/* Copies contiguous src values into the strided view (own loop: the oracle must
 * not lean on the library's copy). */
static void fill_strided(strided *s, const ta_tensor *src)
{
    int64_t idx[TA_MAX_DIMS] = {0};
    const float *p = src->data;
    if (ta_tensor_numel(src) == 0) return;
    int64_t i = 0;
    do {
        ((float *)s->view.data)[offset_of(&s->view, idx)] = p[i++];
    } while (next_index(src->ndim, src->shape, idx));
}

/* "[2, 3]" in one of two static buffers (for messages). */
static const char *shape_str(int slot, int ndim, const int64_t *shape)
{
    static char buf[2][96];
    size_t n = 0;
    buf[slot][n++] = '[';
    for (int d = 0; d < ndim && n < sizeof buf[slot] - 24; d++)
        n += (size_t)snprintf(buf[slot] + n, sizeof buf[slot] - n, "%s%lld", d ? ", " : "",
                              (long long)shape[d]);
    snprintf(buf[slot] + n, sizeof buf[slot] - n, "]");
    return buf[slot];
}

typedef struct case_data {
    const char *name;
    char spec[256];
    char tags[256];
    int nops;
    int expect_error;
    int64_t terms;
    ta_tensor op[2];
    int64_t layout[2][TA_MAX_DIMS];
    int has_layout[2];
    const ta_fixture_record *out, *absout;
    double *want, *absw;
} case_data;

static void case_free(case_data *c)
{
    for (int i = 0; i < 2; i++) ta_tensor_free(&c->op[i]);
    free(c->want);
    free(c->absw);
}

static void case_load(case_data *c, const ta_fixture_file *f, const char *name)
{
    memset(c, 0, sizeof *c);
    c->name = name;
    const char *meta = ta_fixture_case_meta(f, name);
    char buf[64];
    assert_true(ta_fixture_meta_get(meta, "spec", c->spec, sizeof c->spec));
    ta_fixture_meta_get(meta, "tags", c->tags, sizeof c->tags);
    assert_true(ta_fixture_meta_get(meta, "nops", buf, sizeof buf));
    c->nops = atoi(buf);
    assert_true(c->nops == 1 || c->nops == 2);
    assert_true(ta_fixture_meta_get(meta, "expect", buf, sizeof buf));
    c->expect_error = strcmp(buf, "error") == 0;
    for (int i = 0; i < c->nops; i++) {
        const ta_fixture_record *r = ta_fixture_case_record(f, name, i ? "b" : "a");
        if (!r) fail_msg("%s: no operand record %c", name, i ? 'b' : 'a');
        TA_CHECK_OK(ta_fixture_tensor(&c->op[i], r));
        int n = ta_fixture_meta_ints(r->meta, "layout", c->layout[i], TA_MAX_DIMS);
        c->has_layout[i] = n > 0;
        if (n > 0) assert_int_equal(n, r->ndim);
        if (n <= 0) /* default permuted layout: axes reversed */
            for (int d = 0; d < r->ndim; d++) c->layout[i][d] = r->ndim - 1 - d;
    }
    if (c->expect_error) return;
    assert_true(ta_fixture_meta_get(meta, "terms", buf, sizeof buf));
    c->terms = atoll(buf);
    c->out = ta_fixture_case_record(f, name, "out");
    c->absout = ta_fixture_case_record(f, name, "absout");
    assert_non_null(c->out);
    assert_non_null(c->absout);
    assert_int_equal(c->out->numel, c->absout->numel);
    size_t n = (size_t)(c->out->numel ? c->out->numel : 1);
    c->want = malloc(n * sizeof(double));
    c->absw = malloc(n * sizeof(double));
    assert_non_null(c->want);
    assert_non_null(c->absw);
    TA_CHECK_OK(ta_fixture_to_f64(c->want, n, c->out));
    TA_CHECK_OK(ta_fixture_to_f64(c->absw, n, c->absout));
}

/* Into an existing out, or (allocate) into a new tensor made by the _alloc variants. */
static ta_status run_einsum(const case_data *c, ta_tensor *out, const ta_tensor *a,
                            const ta_tensor *b, bool allocate)
{
    if (allocate)
        return c->nops == 1 ? ta_einsum1_alloc(out, c->spec, a)
                            : ta_einsum_alloc(out, c->spec, a, b);
    return c->nops == 1 ? ta_einsum1(out, c->spec, a) : ta_einsum(out, c->spec, a, b);
}

/* Compares got (any strides) with the case's float64 answer; returns the worst
 * err/tol ratio (inf for NaN) and the flat index of the worst element. */
static double compare(const case_data *c, const ta_tensor *got, int64_t *worst_at)
{
    double worst = 0.0;
    *worst_at = -1;
    if (c->out->numel == 0) return 0.0;
    int64_t idx[TA_MAX_DIMS] = {0}, i = 0;
    do {
        double g = ((const float *)got->data)[offset_of(got, idx)];
        double tol = 1e-5 + 2.0 * (double)(c->terms > 1 ? c->terms : 1) * EPS32 * c->absw[i];
        double r = fabs(g - c->want[i]) / tol;
        if (!(r <= worst)) { /* NaN is worse than anything */
            worst = isnan(r) ? INFINITY : r;
            *worst_at = i;
        }
        i++;
    } while (next_index(got->ndim, got->shape, idx));
    return worst;
}

/* Runs one case in one layout variant. Returns 1 on pass; prints why otherwise. */
static int run_variant(const case_data *c, enum variant v, double *worst_ratio)
{
    strided in[2] = {{{0}, NULL, 0}, {{0}, NULL, 0}}, outbuf = {{0}, NULL, 0};
    const ta_tensor *ops[2] = {&c->op[0], c->nops > 1 ? &c->op[1] : NULL};
    int ok = 0;
    if (v != V_CONTIGUOUS) {
        for (int i = 0; i < c->nops; i++) {
            const ta_tensor *t = &c->op[i];
            if (!make_layout(&in[i], t->ndim, t->shape, v, c->layout[i], t->ndim - 1))
                fail_msg("%s: cannot build a %s layout", c->name, variant_names[v]);
            fill_strided(&in[i], t);
            ops[i] = &in[i].view;
        }
    }
    ta_tensor result = {0};
    ta_tensor *out = &result;
    if (v == V_GAPPED || v == V_NEGATIVE) { /* caller-provided, strided output */
        if (!make_layout(&outbuf, c->out->ndim, c->out->shape, v, NULL, c->out->ndim ? 0 : -1))
            fail_msg("%s: cannot build the output layout", c->name);
        out = &outbuf.view;
    }
    ta_status st = run_einsum(c, out, ops[0], ops[1], out == &result);
    if (st != TA_OK) {
        print_message("FAIL %s '%s' [%s] %s: %s: %s\n", c->name, c->spec, c->tags,
                      variant_names[v], ta_status_name(st), ta_last_error());
        goto done;
    }
    if (out->ndim != c->out->ndim ||
        memcmp(out->shape, c->out->shape, (size_t)out->ndim * sizeof(int64_t)) != 0) {
        print_message("FAIL %s '%s' [%s] %s: result has shape %s, torch's %s\n", c->name,
                      c->spec, c->tags, variant_names[v], shape_str(0, out->ndim, out->shape),
                      shape_str(1, c->out->ndim, c->out->shape));
        goto done;
    }
    int64_t at;
    double r = compare(c, out, &at);
    *worst_ratio = ta_test_worse(*worst_ratio, r);
    if (!(r <= 1.0)) {
        print_message("FAIL %s '%s' [%s] %s: element %lld off by %.3g x the bound "
                      "(want %.9g)\n", c->name, c->spec, c->tags, variant_names[v],
                      (long long)at, r, at >= 0 ? c->want[at] : 0.0);
        goto done;
    }
    if (outbuf.buf) { /* gaps of the caller's output must be untouched (still NaN) */
        int64_t idx[TA_MAX_DIMS] = {0};
        char *written = calloc((size_t)outbuf.span, 1);
        assert_non_null(written);
        int64_t base = (float *)outbuf.view.data - outbuf.buf;
        if (c->out->numel)
            do written[base + offset_of(&outbuf.view, idx)] = 1;
            while (next_index(outbuf.view.ndim, outbuf.view.shape, idx));
        int64_t bad = -1;
        for (int64_t i = 0; i < outbuf.span && bad < 0; i++)
            if (!written[i] && !isnan(outbuf.buf[i])) bad = i;
        free(written);
        if (bad >= 0) {
            print_message("FAIL %s '%s' [%s] %s: wrote outside the output view (slot %lld)\n",
                          c->name, c->spec, c->tags, variant_names[v], (long long)bad);
            goto done;
        }
    }
    ok = 1;
done:
    if (out == &result) ta_tensor_free(&result);
    strided_free(&outbuf);
    strided_free(&in[0]);
    strided_free(&in[1]);
    return ok;
}

static ta_fixture_file *open_einsum(void)
{
    ta_fixture_file *f = NULL;
    TA_CHECK_OK(ta_fixture_open(&f, "einsum.tafx"));
    return f;
}

/* ------------------------------------------------------------------ tests */

/* Every accepted case, every layout, matches torch within the bound. */
static void test_einsum_matches_torch(void **state)
{
    (void)state;
    ta_fixture_file *f = open_einsum();
    int failures = 0, runs = 0, cases = 0;
    double worst = 0.0;
    for (int i = 0; i < ta_fixture_case_count(f); i++) {
        case_data c;
        case_load(&c, f, ta_fixture_case_name(f, i));
        if (!c.expect_error) {
            cases++;
            /* the shape query agrees with torch */
            int nd = -1;
            int64_t shape[TA_MAX_DIMS];
            ta_status st = ta_einsum_shape(&nd, shape, c.spec, &c.op[0],
                                           c.nops > 1 ? &c.op[1] : NULL);
            if (st != TA_OK || nd != c.out->ndim ||
                memcmp(shape, c.out->shape, (size_t)(nd > 0 ? nd : 0) * sizeof(int64_t))) {
                print_message("FAIL %s '%s' [%s] ta_einsum_shape: %s %s, torch's %s\n", c.name,
                              c.spec, c.tags, st ? ta_last_error() : "shape",
                              st ? "" : shape_str(0, nd, shape),
                              shape_str(1, c.out->ndim, c.out->shape));
                failures++;
            }
            for (int v = 0; v < V_COUNT; v++) {
                runs++;
                failures += !run_variant(&c, (enum variant)v, &worst);
            }
        }
        case_free(&c);
    }
    print_message("einsum vs torch: %d cases x %d layouts, worst error %.4f of the bound, "
                  "%d failures (ISA %s)\n", cases, V_COUNT, worst, failures,
                  ta_isa_name(ta_active_isa()));
    ta_fixture_close(f);
    assert_true(cases >= 30);
    assert_true(runs == cases * V_COUNT);
    if (failures) fail_msg("%d einsum fixture checks failed (see FAIL lines)", failures);
}

/* What torch rejects is rejected, with a message, and the output left untouched. */
static void test_einsum_rejects_what_torch_rejects(void **state)
{
    (void)state;
    ta_fixture_file *f = open_einsum();
    int failures = 0, cases = 0;
    for (int i = 0; i < ta_fixture_case_count(f); i++) {
        case_data c;
        case_load(&c, f, ta_fixture_case_name(f, i));
        if (c.expect_error) {
            cases++;
            ta_tensor out = {0};
            ta_status st = run_einsum(&c, &out, &c.op[0], c.nops > 1 ? &c.op[1] : NULL, true);
            int nd;
            int64_t shape[TA_MAX_DIMS];
            ta_status sst = ta_einsum_shape(&nd, shape, c.spec, &c.op[0],
                                            c.nops > 1 ? &c.op[1] : NULL);
            if (st == TA_OK || sst == TA_OK || out.data || out.ndim || !ta_last_error()[0]) {
                print_message("FAIL %s '%s' [%s]: torch rejects it, ta_einsum gave %s "
                              "(shape query %s)\n", c.name, c.spec, c.tags, ta_status_name(st),
                              ta_status_name(sst));
                failures++;
            }
            ta_tensor_free(&out);
        }
        case_free(&c);
    }
    ta_fixture_close(f);
    assert_true(cases >= 5);
    if (failures) fail_msg("%d invalid specs were accepted", failures);
}

/* The reader: a valid file has its sets' structure. */
static void test_fixture_file_structure(void **state)
{
    (void)state;
    ta_fixture_file *f = open_einsum();
    assert_int_equal(ta_fixture_version(f), 1);
    const ta_fixture_record *set = ta_fixture_find(f, "_set/meta");
    assert_non_null(set);
    char buf[64];
    assert_true(ta_fixture_meta_get(set->meta, "set", buf, sizeof buf));
    assert_string_equal(buf, "einsum");
    assert_false(ta_fixture_meta_get(set->meta, "nope", buf, sizeof buf));
    assert_true(ta_fixture_case_count(f) >= 30);
    assert_null(ta_fixture_case_name(f, ta_fixture_case_count(f)));
    assert_null(ta_fixture_find(f, "no/such"));
    const ta_fixture_record *a = ta_fixture_case_record(f, "case000", "a");
    assert_non_null(a);
    assert_int_equal(a->dtype, TA_FIXTURE_F32);
    assert_int_equal((uintptr_t)a->data % 64, 0);
    ta_fixture_close(f);
}

/* Writes the CRC of bytes[0, size - 4) into the last four bytes, so that a structural
 * corruption gets past the CRC check and must be caught by the parser itself. */
static void fix_crc(unsigned char *bytes, size_t size)
{
    uint32_t crc = ta_fixture_crc32(bytes, size - 4);
    for (int k = 0; k < 4; k++) bytes[size - 4 + k] = (unsigned char)(crc >> (8 * k));
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void expect_format_error(const unsigned char *bytes, size_t size, const char *what)
{
    ta_fixture_file *f = NULL;
    ta_status st = ta_fixture_parse(&f, bytes, size);
    if (st != TA_EFORMAT) {
        ta_fixture_close(f);
        fail_msg("%s: parse gave %s, expected TA_EFORMAT", what, ta_status_name(st));
    }
    assert_null(f);
}

/* The reader rejects truncated and corrupted files with TA_EFORMAT, never crashing
 * (run under -fsanitize=address to see it read nothing out of bounds). */
static void test_reader_rejects_damaged_files(void **state)
{
    (void)state;
    unsigned char *bytes;
    size_t size;
    TA_CHECK_OK(ta_fixture_read_bytes(&bytes, &size, "einsum.tafx"));
    assert_true(size > 4096);
    unsigned char *tmp = malloc(size + 16);
    assert_non_null(tmp);
    char what[96];

    /* plain truncation: caught by the size and CRC checks */
    for (size_t len = 0; len < size; len += len < 64 ? 1 : size / 97) {
        snprintf(what, sizeof what, "truncated to %zu bytes", len);
        memcpy(tmp, bytes, len);
        expect_format_error(tmp, len, what);
    }
    for (size_t len = size - 8; len < size; len++) expect_format_error(bytes, len, "tail cut");

    /* truncation with a valid CRC re-appended: every structural bound is exercised */
    for (size_t len = 12; len < size - 4; len += len < 3000 ? 1 : size / 211) {
        memcpy(tmp, bytes, len);
        /* a count (>= 1) that fits the prefix, so the parser walks into the cut */
        uint32_t count = get_u32(bytes + 8), fits = (uint32_t)((len - 12) / 25);
        put_u32(tmp + 8, count < fits ? count : fits ? fits : 1);
        fix_crc(tmp, len + 4);
        snprintf(what, sizeof what, "truncated to %zu bytes, CRC fixed", len);
        expect_format_error(tmp, len + 4, what);
    }

    /* a flipped bit anywhere fails the CRC */
    for (size_t pos = 0; pos < size; pos += size / 61 + 1) {
        memcpy(tmp, bytes, size);
        tmp[pos] ^= 0x10;
        expect_format_error(tmp, size, "bit flip");
    }

    /* header and first-record fields made invalid (CRC fixed) */
    uint32_t name_len = get_u32(bytes + 12);
    size_t meta_at = 16 + name_len;
    uint32_t meta_len = get_u32(bytes + meta_at);
    size_t dtype_at = meta_at + 4 + meta_len, ndim_at = dtype_at + 4, shape_at = ndim_at + 4;
    assert_int_equal(get_u32(bytes + ndim_at), 1); /* "_set/meta" is a [0] u8 record */
    struct {
        size_t at;
        uint32_t value;
        const char *what;
    } edits[] = {
        {0, 0x54414658u, "magic XFAT"},        {4, 2, "version 2"},
        {4, 0, "version 0"},              {8, 0xFFFFFFFFu, "record count huge"},
        {8, 0, "record count 0 (stray bytes)"}, {12, 0, "empty name"},
        {12, 0xFFFFFFFFu, "name length huge"}, {12, (uint32_t)size, "name past the end"},
        {meta_at, 0xFFFFFFF0u, "meta length huge"}, {dtype_at, 0, "dtype 0"},
        {dtype_at, 99, "dtype 99"},       {ndim_at, 9, "ndim 9"},
        {ndim_at, 0xFFFFFFFFu, "ndim huge"}, {shape_at + 4, 0x80000000u, "negative extent"},
        {shape_at, 5, "extent disagrees with the size field"},
        {shape_at + 8, 1, "size field disagrees with the extent"},
    };
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        memcpy(tmp, bytes, size);
        put_u32(tmp + edits[e].at, edits[e].value);
        fix_crc(tmp, size);
        expect_format_error(tmp, size, edits[e].what);
    }
    /* stray bytes between the last record and the CRC */
    memcpy(tmp, bytes, size - 4);
    memset(tmp + size - 4, 0, 8);
    fix_crc(tmp, size + 4);
    expect_format_error(tmp, size + 4, "stray bytes");

    /* random byte edits with the CRC fixed: any outcome but a crash or a leak */
    uint32_t x = 12345;
    for (int trial = 0; trial < 300; trial++) {
        memcpy(tmp, bytes, size);
        for (int k = 0; k < 3; k++) {
            x = x * 1664525u + 1013904223u;
            size_t pos = (x >> 8) % (trial < 200 ? 2048 : size - 4);
            tmp[pos] = (unsigned char)(x >> 24);
        }
        fix_crc(tmp, size);
        ta_fixture_file *f = NULL;
        ta_status st = ta_fixture_parse(&f, tmp, size);
        assert_true(st == TA_OK || st == TA_EFORMAT);
        assert_true((st == TA_OK) == (f != NULL));
        ta_fixture_close(f);
    }

    /* and the untouched bytes parse */
    ta_fixture_file *f = NULL;
    TA_CHECK_OK(ta_fixture_parse(&f, bytes, size));
    ta_fixture_close(f);
    TA_CHECK_ERR(ta_fixture_open(&f, "no-such-file.tafx"), TA_EIO, "no-such-file.tafx");
    free(tmp);
    free(bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_file_structure),
        cmocka_unit_test(test_reader_rejects_damaged_files),
        cmocka_unit_test(test_einsum_matches_torch),
        cmocka_unit_test(test_einsum_rejects_what_torch_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
