/* NumPy .npy reader and writer.
 *
 * Format (numpy/lib/format.py, NEP 1): the magic "\x93NUMPY", major and minor version
 * bytes, the header length (uint16 LE in 1.0, uint32 LE in 2.0 and 3.0), then an ASCII
 * (3.0: UTF-8) Python dict literal {'descr': '<f4', 'fortran_order': False,
 * 'shape': (2, 3), } padded with spaces and ended by '\n', then the raw data. */
#include "io/io_internal.h"

#include "core/tensor_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

/* numpy itself refuses headers above 10000 bytes unless told otherwise; anything near
 * this limit is not a tensor header. */
#define NPY_MAX_HEADER ((size_t)1 << 20)

typedef enum npy_kind { NPY_F4, NPY_F8, NPY_F2, NPY_B1, NPY_U1, NPY_I4, NPY_I8 } npy_kind;

static const struct npy_dtype {
    const char *descr;
    npy_kind kind;
    size_t size;
} npy_dtypes[] = {
    {"<f4", NPY_F4, 4}, {"<f8", NPY_F8, 8}, {"<f2", NPY_F2, 2}, {"|b1", NPY_B1, 1},
    {"|u1", NPY_U1, 1}, {"<i4", NPY_I4, 4}, {"<i8", NPY_I8, 8},
};

/* What each loader accepts, and how its message lists it. */
#define NPY_FLOAT_KINDS                                                                   \
    ((1u << NPY_F4) | (1u << NPY_F8) | (1u << NPY_F2) | (1u << NPY_B1) | (1u << NPY_U1) | \
     (1u << NPY_I4) | (1u << NPY_I8))
#define NPY_FLOAT_LIST "<f4, <f8, <f2, |b1, |u1, <i4 or <i8"
#define NPY_INT_KINDS ((1u << NPY_I4) | (1u << NPY_I8))
#define NPY_INT_LIST "<i4 or <i8"

typedef struct npy_file {
    FILE *fp;
    const char *fn, *path;
    npy_kind kind;
    size_t itemsize;
    int ndim;
    int64_t shape[TA_MAX_DIMS];
    int64_t numel;
    size_t data_bytes;
    size_t offset; /* bytes consumed so far (for messages) */
} npy_file;

/* "fn: path: <message>" with the given code. */
static ta_status npy_fail(const npy_file *f, ta_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ta_status npy_fail(const npy_file *f, ta_status code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ta_error(code, "%s: %s: %s", f->fn, f->path, msg);
}

/* Reads exactly n bytes; a short read is truncation (TA_EFORMAT) or a read error. */
static ta_status npy_read(npy_file *f, void *dst, size_t n, const char *what)
{
    size_t got = fread(dst, 1, n, f->fp);
    if (got == n) {
        f->offset += n;
        return TA_OK;
    }
    if (ferror(f->fp))
        return npy_fail(f, TA_EIO, "read error in the %s: %s", what, strerror(errno));
    return npy_fail(f, TA_EFORMAT,
                    "truncated file: the %s needs %zu bytes at offset %zu but the file ends "
                    "after %zu",
                    what, n, f->offset, f->offset + got);
}

/* ------------------------------------------------------ header dict parser */

typedef struct cursor {
    const char *p, *begin, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static bool eat_word(cursor *c, const char *word)
{
    size_t n = strlen(word);
    skip_ws(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

/* A Python string literal without escapes ('<f4' or "<f4"). A NUL byte is refused: it
 * would end the C string, so '<f4\0junk' would read as '<f4' (numpy refuses it too). */
static bool parse_str(cursor *c, char *out, size_t cap)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || *c->p == '\n' || *c->p == '\0' || n + 1 >= cap) return false;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return false;
    c->p++;
    out[n] = '\0';
    return true;
}

/* The header as printable text for messages (truncated, non-printables as '?'). */
static const char *header_excerpt(char *buf, size_t cap, const char *h, size_t n)
{
    size_t k = 0;
    while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\n')) n--;
    for (size_t i = 0; i < n && k + 4 < cap; i++) buf[k++] = (h[i] >= 32 && h[i] < 127) ? h[i] : '?';
    if (k + 4 >= cap) memcpy(buf + k, "...", 3), k += 3;
    buf[k] = '\0';
    return buf;
}

static ta_status header_error(const npy_file *f, const cursor *c, const char *expected)
{
    char ex[120];
    return npy_fail(f, TA_EFORMAT, "malformed header at byte %zu (expected %s): %s",
                    (size_t)(c->p - c->begin), expected,
                    header_excerpt(ex, sizeof ex, c->begin, (size_t)(c->end - c->begin)));
}

/* shape: '(' [int (',' int)* [',']] ')', ints non-negative; Python 2 files may add 'L'. */
static ta_status parse_shape(npy_file *f, cursor *c)
{
    if (!eat(c, '(')) return header_error(f, c, "'(' opening the shape tuple");
    f->ndim = 0;
    for (;;) {
        if (eat(c, ')')) return TA_OK;
        skip_ws(c);
        if (c->p < c->end && *c->p == '-')
            return npy_fail(f, TA_EFORMAT, "shape has a negative dimension");
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return header_error(f, c, "a dimension or ')' in the shape");
        uint64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            unsigned d = (unsigned)(*c->p++ - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10)
                return npy_fail(f, TA_EFORMAT, "shape dimension %d does not fit in int64",
                                f->ndim);
            v = v * 10 + d;
        }
        if (c->p < c->end && *c->p == 'L') c->p++;
        if (f->ndim == TA_MAX_DIMS)
            return npy_fail(f, TA_EUNSUPPORTED, "more than %d dimensions are not supported",
                            TA_MAX_DIMS);
        f->shape[f->ndim++] = (int64_t)v;
        if (!eat(c, ',')) {
            if (eat(c, ')')) return TA_OK;
            return header_error(f, c, "',' or ')' in the shape");
        }
    }
}

/* Fills kind, itemsize, ndim, shape from the dict literal h[0..n). */
static ta_status parse_header(npy_file *f, const char *h, size_t n, unsigned accepted,
                              const char *accepted_list)
{
    cursor c = {h, h, h + n};
    char key[32], descr[40];
    bool seen_descr = false, seen_fortran = false, seen_shape = false, fortran = false;
    ta_status st;
    if (!eat(&c, '{')) return header_error(f, &c, "'{'");
    while (!eat(&c, '}')) {
        if (!parse_str(&c, key, sizeof key)) return header_error(f, &c, "a quoted key or '}'");
        if (!eat(&c, ':')) return header_error(f, &c, "':' after the key");
        bool *seen;
        if (!strcmp(key, "descr")) {
            seen = &seen_descr;
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return npy_fail(f, TA_EUNSUPPORTED,
                                "structured dtypes are not supported (expected %s)",
                                accepted_list);
            if (!parse_str(&c, descr, sizeof descr))
                return header_error(f, &c, "a quoted dtype string after 'descr'");
        } else if (!strcmp(key, "fortran_order")) {
            seen = &seen_fortran;
            if (eat_word(&c, "True"))
                fortran = true;
            else if (eat_word(&c, "False"))
                fortran = false;
            else
                return header_error(f, &c, "True or False after 'fortran_order'");
        } else if (!strcmp(key, "shape")) {
            seen = &seen_shape;
            if ((st = parse_shape(f, &c))) return st;
        } else {
            return npy_fail(f, TA_EFORMAT, "unexpected key '%s' in the header", key);
        }
        if (*seen) return npy_fail(f, TA_EFORMAT, "key '%s' appears twice in the header", key);
        *seen = true;
        if (!eat(&c, ',')) {
            if (eat(&c, '}')) break;
            return header_error(f, &c, "',' or '}' after a value");
        }
    }
    skip_ws(&c);
    if (c.p != c.end) return header_error(f, &c, "only padding after '}'");
    if (!seen_descr || !seen_fortran || !seen_shape)
        return npy_fail(f, TA_EFORMAT, "header lacks the key '%s'",
                        !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");

    const struct npy_dtype *dt = NULL;
    for (size_t i = 0; i < sizeof npy_dtypes / sizeof npy_dtypes[0]; i++)
        if (!strcmp(descr, npy_dtypes[i].descr) && (accepted >> npy_dtypes[i].kind & 1u))
            dt = &npy_dtypes[i];
    if (!dt) {
        if (descr[0] == '>')
            return npy_fail(f, TA_EUNSUPPORTED,
                            "big-endian dtype '%s' is not supported (expected %s)", descr,
                            accepted_list);
        return npy_fail(f, TA_EUNSUPPORTED, "unsupported dtype '%s' (expected %s)", descr,
                        accepted_list);
    }
    if (fortran)
        return npy_fail(f, TA_EUNSUPPORTED,
                        "fortran_order True is not supported; save a C-order array "
                        "(numpy.ascontiguousarray)");
    f->kind = dt->kind;
    f->itemsize = dt->size;
    char s[TA_SHAPE_STR_MAX];
    /* The float32 result must fit too: numel * max(itemsize, 4) bytes. */
    size_t bytes;
    if (!ta_shape_numel(&f->numel, f->ndim, f->shape) ||
        !ta_mul_size(&f->data_bytes, (size_t)f->numel, f->itemsize) ||
        !ta_mul_size(&bytes, (size_t)f->numel, 8))
        return npy_fail(f, TA_EFORMAT, "shape %s has more bytes than size_t can count",
                        ta_shape_str(s, sizeof s, f->ndim, f->shape));
    return TA_OK;
}

/* ------------------------------------------------------------ file access */

/* Opens path and reads the preamble and header; on success f->fp is at the data. */
static ta_status npy_open(npy_file *f, const char *fn, const char *path, unsigned accepted,
                          const char *accepted_list)
{
    memset(f, 0, sizeof *f);
    f->fn = fn;
    f->path = path;
    f->fp = fopen(path, "rb");
    if (!f->fp) return npy_fail(f, TA_EIO, "cannot open: %s", strerror(errno));
    struct stat sb = {0};
    if (fstat(fileno(f->fp), &sb) == 0 && S_ISDIR(sb.st_mode))
        return npy_fail(f, TA_EIO, "cannot read: %s", strerror(EISDIR));

    unsigned char pre[12];
    ta_status st = npy_read(f, pre, 10, "preamble");
    if (st) return st;
    if (memcmp(pre, "\x93NUMPY", 6) != 0)
        return npy_fail(f, TA_EFORMAT, "not a .npy file (bad magic; expected \\x93NUMPY)");
    unsigned major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return npy_fail(f, TA_EUNSUPPORTED,
                        "unsupported .npy format version %u.%u (expected 1.0, 2.0 or 3.0)",
                        major, minor);
    size_t hlen;
    if (major == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else {
        if ((st = npy_read(f, pre + 10, 2, "header length"))) return st;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
               (size_t)pre[11] << 24;
    }
    if (hlen > NPY_MAX_HEADER)
        return npy_fail(f, TA_EFORMAT, "header length %zu is beyond the limit of %zu bytes",
                        hlen, NPY_MAX_HEADER);
    char *h = ta_alloc(hlen + 1);
    if (!h) return TA_ENOMEM;
    st = npy_read(f, h, hlen, "header");
    if (!st) {
        h[hlen] = '\0';
        st = parse_header(f, h, hlen, accepted, accepted_list);
    }
    ta_free(h);
    if (st) return st;
    /* Fail on a short file before allocating what its header claims. */
    /* (in this order: offset + data_bytes can wrap past 2^64 for a shape near the limit
     * of size_t, and the float32 result of such a shape would then be allocated) */
    if (S_ISREG(sb.st_mode) && ((uint64_t)sb.st_size < f->offset ||
                                (uint64_t)sb.st_size - f->offset < (uint64_t)f->data_bytes))
        return npy_fail(f, TA_EFORMAT,
                        "truncated data: the shape and dtype need %zu bytes after the "
                        "%zu-byte header but the file has %llu",
                        f->data_bytes, f->offset, (unsigned long long)sb.st_size - f->offset);
    return TA_OK;
}

/* After the data: the file must end. */
static ta_status npy_check_end(npy_file *f)
{
    if (fgetc(f->fp) == EOF) return TA_OK;
    struct stat sb;
    if (fstat(fileno(f->fp), &sb) == 0 && S_ISREG(sb.st_mode))
        return npy_fail(f, TA_EFORMAT, "%llu trailing bytes after the data",
                        (unsigned long long)sb.st_size - f->offset);
    return npy_fail(f, TA_EFORMAT, "trailing bytes after the data");
}

static ta_status npy_finish(npy_file *f, ta_status st)
{
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
    return st;
}

/* The dtype that a floating-point kind of the file is, or -1 (integers, booleans). */
static int kind_dtype(npy_kind kind)
{
    return kind == NPY_F4 ? TA_F32 : kind == NPY_F8 ? TA_F64 : kind == NPY_F2 ? TA_F16 : -1;
}

/* src: count items of an integer or boolean kind, element `first` onwards, into float32
 * dst, each exactly. */
static ta_status int_to_float(npy_file *f, float *dst, const unsigned char *src, size_t count,
                              size_t first)
{
    for (size_t i = 0; i < count; i++) {
        const unsigned char *p = src + i * f->itemsize;
        int64_t v;
        if (f->kind == NPY_B1) {
            dst[i] = p[0] ? 1.0f : 0.0f;
            continue;
        }
        if (f->kind == NPY_U1) {
            v = p[0];
        } else if (f->kind == NPY_I4) {
            int32_t w;
            memcpy(&w, p, 4);
            v = w;
        } else {
            memcpy(&v, p, 8);
        }
        float x = (float)v;
        /* 2^63 as a float is out of int64 range: such values are never exact. */
        if (x >= 0x1p63f || (int64_t)x != v)
            return npy_fail(f, TA_EUNSUPPORTED,
                            "element %zu (%lld) is not exactly representable as float32; "
                            "load integers with ta_npy_load_int64",
                            first + i, (long long)v);
        dst[i] = x;
    }
    return TA_OK;
}

/* The data into a new tensor of dtype: a copy when the file holds that type, else in
 * chunks, floats converted once (a float64 rounds straight to the type), integers and
 * booleans through float32 (exact, or refused by int_to_float). */
static ta_status load(ta_tensor *out, npy_file *f, ta_dtype dtype)
{
    ta_tensor t;
    ta_status st = ta_tensor_empty_dtype(&t, dtype, f->ndim, f->shape);
    if (st) return st;
    unsigned char *dst = t.data;
    size_t n = (size_t)f->numel, size = ta_dtype_size(dtype);
    int file_dtype = kind_dtype(f->kind);
    if (file_dtype == (int)dtype) {
        st = npy_read(f, dst, f->data_bytes, "data");
    } else {
        unsigned char *buf = ta_alloc(2 * TA_IO_CHUNK);
        if (!buf) st = TA_ENOMEM;
        float *tmp = (float *)(buf + TA_IO_CHUNK);
        size_t per = TA_IO_CHUNK / 8;
        for (size_t done = 0; !st && done < n; done += per) {
            size_t k = TA_MIN(per, n - done);
            void *d = dst + done * size;
            if ((st = npy_read(f, buf, k * f->itemsize, "data"))) break;
            if (file_dtype >= 0)
                ta_convert_strided(d, dtype, 1, buf, (ta_dtype)file_dtype, 1, (int64_t)k);
            else if (!(st = int_to_float(f, dtype == TA_F32 ? d : tmp, buf, k, done)) &&
                     dtype != TA_F32)
                ta_convert_strided(d, dtype, 1, tmp, TA_F32, 1, (int64_t)k);
        }
        ta_free(buf);
    }
    if (!st) st = npy_check_end(f);
    if (st) {
        ta_tensor_free(&t);
        return st;
    }
    *out = t;
    return TA_OK;
}

static ta_status load_path(const char *fn, ta_tensor *out, const char *path, ta_dtype dtype)
{
    if (!out) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    if (!path || !*path) return ta_error(TA_EINVAL, "%s: path is NULL or empty", fn);
    ta_status st = ta_dtype_check(fn, "dtype", dtype, TA_ACCEPT_STORAGE);
    if (st) return st;
    npy_file f;
    st = npy_open(&f, fn, path, NPY_FLOAT_KINDS, NPY_FLOAT_LIST);
    if (!st) st = load(out, &f, dtype);
    return npy_finish(&f, st);
}

ta_status ta_npy_load(ta_tensor *out, const char *path)
{
    return load_path("ta_npy_load", out, path, TA_F32);
}

ta_status ta_npy_load_dtype(ta_tensor *out, const char *path, ta_dtype dtype)
{
    return load_path("ta_npy_load_dtype", out, path, dtype);
}

ta_status ta_npy_load_int64(int64_t **values, int *ndim, int64_t shape[TA_MAX_DIMS],
                            const char *path)
{
    const char *fn = "ta_npy_load_int64";
    if (!values || !ndim || !shape)
        return ta_error(TA_EINVAL, "%s: %s is NULL", fn,
                        !values ? "values" : !ndim ? "ndim" : "shape");
    if (!path || !*path) return ta_error(TA_EINVAL, "%s: path is NULL or empty", fn);
    npy_file f;
    ta_status st = npy_open(&f, fn, path, NPY_INT_KINDS, NPY_INT_LIST);
    if (st) return npy_finish(&f, st);
    size_t n = (size_t)f.numel;
    int64_t *v = ta_alloc(n ? n * sizeof(int64_t) : sizeof(int64_t));
    if (!v) return npy_finish(&f, TA_ENOMEM);
    if (f.kind == NPY_I8) {
        st = npy_read(&f, v, f.data_bytes, "data");
    } else {
        /* Widen through a bounded buffer (16 KiB, fine on any thread's stack). */
        int32_t buf[4096];
        for (size_t done = 0; !st && done < n; done += 4096) {
            size_t k = TA_MIN((size_t)4096, n - done);
            st = npy_read(&f, buf, k * 4, "data");
            for (size_t i = 0; !st && i < k; i++) v[done + i] = buf[i];
        }
    }
    if (!st) st = npy_check_end(&f);
    if (st) {
        ta_free(v);
        return npy_finish(&f, st);
    }
    *values = v;
    *ndim = f.ndim;
    for (int i = 0; i < f.ndim; i++) shape[i] = f.shape[i];
    return npy_finish(&f, TA_OK);
}

void ta_npy_free(void *values) { ta_free(values); }

/* ------------------------------------------------------------------ writer */

/* t: any shape and strides; f32 as '<f4', f16 '<f2', f64 '<f8', bf16 widened to '<f4'. */
ta_status ta_npy_save(const char *path, const ta_tensor *t)
{
    const char *fn = "ta_npy_save";
    if (!path || !*path) return ta_error(TA_EINVAL, "%s: path is NULL or empty", fn);
    ta_status st = ta_tensor_check_dtypes(fn, "t", t, TA_ACCEPT_ANY);
    if (st) return st;
    ta_dtype as = t->dtype == TA_BF16 ? TA_F32 : t->dtype;
    const char *descr = as == TA_F16 ? "<f2" : as == TA_F64 ? "<f8" : "<f4";

    /* Preamble (10 bytes) + dict + '\n', padded with spaces to a multiple of 64 as
     * numpy writes it (format.ARRAY_ALIGN), so the data can be mapped aligned. Eight
     * 19-digit dimensions need 232 bytes before padding: 256 in all. */
    char head[320];
    int n = snprintf(head + 10, sizeof head - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    for (int i = 0; i < t->ndim; i++)
        n += snprintf(head + 10 + n, sizeof head - 10 - (size_t)n, "%lld,%s",
                      (long long)t->shape[i], i + 1 < t->ndim ? " " : "");
    /* A 1-tuple keeps its comma, "(3,)"; longer tuples drop the last one, "(2, 3)". */
    if (t->ndim > 1) n--;
    n += snprintf(head + 10 + n, sizeof head - 10 - (size_t)n, "), }");
    size_t total = ((size_t)(10 + n + 1) + 63) / 64 * 64;
    memset(head + 10 + n, ' ', total - 10 - (size_t)n - 1);
    head[total - 1] = '\n';
    size_t hlen = total - 10;
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (char)(hlen & 0xff);
    head[9] = (char)(hlen >> 8);

    ta_atomic_file af;
    if ((st = ta_atomic_open(&af, fn, path))) return st;
    if ((st = ta_atomic_write(&af, head, total))) return st;
    if ((st = ta_atomic_write_tensor(&af, t, as))) return st;
    return ta_atomic_commit(&af);
}
