/* .tafx fixture reader: every read is bounds-checked against the file size, so a
 * truncated or corrupted file yields TA_EFORMAT and a message, never a crash. The
 * trailing CRC-32 catches flipped bits in the data, which no structural check can. */
#include "fixtures.h"

#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TA_FIXTURE_DIR
#define TA_FIXTURE_DIR "tests/fixtures"
#endif

#define FX_MAX_NAME 4096u
#define FX_MAX_META 65536u
#define FX_MAX_FILE ((size_t)1 << 30)
/* Smallest possible record: name length + 1 byte, meta length, dtype, ndim, nbytes. */
#define FX_MIN_RECORD (4u + 1u + 4u + 4u + 4u + 8u)

struct ta_fixture_file {
    uint32_t version;
    int nrecords;
    ta_fixture_record *records;
    int ncases;
    char **cases;
};

/* ------------------------------------------------------------ CRC-32 */

/* Table-driven (one byte a step): the corruption tests parse the file hundreds of times.
 * The table is filled on first use; a race there writes the same values twice. */
static uint32_t crc_table[256];
static int crc_table_ready;

uint32_t ta_fixture_crc32(const void *bytes, size_t size)
{
    if (!crc_table_ready) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
            crc_table[n] = c;
        }
        crc_table_ready = 1;
    }
    const unsigned char *p = bytes;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; i++) crc = crc_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------------ cursor */

typedef struct cursor {
    const unsigned char *p;
    size_t size, pos;
} cursor;

static int take(cursor *c, size_t n, const unsigned char **out)
{
    if (n > c->size - c->pos) return 0;
    *out = c->p + c->pos;
    c->pos += n;
    return 1;
}

static int take_u32(cursor *c, uint32_t *v)
{
    const unsigned char *b;
    if (!take(c, 4, &b)) return 0;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 1;
}

static int take_u64(cursor *c, uint64_t *v)
{
    uint32_t lo, hi;
    if (!take_u32(c, &lo) || !take_u32(c, &hi)) return 0;
    *v = (uint64_t)hi << 32 | lo;
    return 1;
}

static size_t dtype_size(uint32_t code)
{
    switch (code) {
    case TA_FIXTURE_F32: return 4;
    case TA_FIXTURE_F64: return 8;
    case TA_FIXTURE_I64: return 8;
    case TA_FIXTURE_U8: return 1;
    case TA_FIXTURE_I32: return 4;
    default: return 0;
    }
}

static int host_is_little_endian(void)
{
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ------------------------------------------------------------ parse */

static char *copy_text(const unsigned char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

void ta_fixture_close(ta_fixture_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->nrecords; i++) {
        free((void *)f->records[i].name);
        free((void *)f->records[i].meta);
        free((void *)f->records[i].data);
    }
    for (int i = 0; i < f->ncases; i++) free(f->cases[i]);
    free(f->records);
    free(f->cases);
    free(f);
}

/* Parses record number idx at the cursor into *r (fields allocated; the caller frees
 * them through ta_fixture_close even on failure). */
static ta_status parse_record(ta_fixture_record *r, cursor *c, int idx)
{
    const char *fn = "ta_fixture_parse";
    uint32_t name_len, meta_len, dtype, ndim;
    const unsigned char *p;
    size_t at = c->pos;
    if (!take_u32(c, &name_len) || name_len == 0 || name_len > FX_MAX_NAME ||
        !take(c, name_len, &p))
        return ta_error(TA_EFORMAT, "%s: record %d (offset %zu): bad or truncated name", fn,
                        idx, at);
    if (memchr(p, '\0', name_len))
        return ta_error(TA_EFORMAT, "%s: record %d: name contains NUL", fn, idx);
    if (!(r->name = copy_text(p, name_len))) return ta_error(TA_ENOMEM, "%s: out of memory", fn);
    if (!take_u32(c, &meta_len) || meta_len > FX_MAX_META || !take(c, meta_len, &p))
        return ta_error(TA_EFORMAT, "%s: record '%s': bad or truncated metadata", fn, r->name);
    if (memchr(p, '\0', meta_len))
        return ta_error(TA_EFORMAT, "%s: record '%s': metadata contains NUL", fn, r->name);
    if (!(r->meta = copy_text(p, meta_len))) return ta_error(TA_ENOMEM, "%s: out of memory", fn);
    if (!take_u32(c, &dtype) || !take_u32(c, &ndim))
        return ta_error(TA_EFORMAT, "%s: record '%s': truncated header", fn, r->name);
    size_t esize = dtype_size(dtype);
    if (!esize)
        return ta_error(TA_EFORMAT, "%s: record '%s': unknown dtype code %u", fn, r->name,
                        (unsigned)dtype);
    if (ndim > TA_MAX_DIMS)
        return ta_error(TA_EFORMAT, "%s: record '%s': ndim %u > %d", fn, r->name,
                        (unsigned)ndim, TA_MAX_DIMS);
    r->dtype = (ta_fixture_dtype)dtype;
    r->ndim = (int)ndim;
    for (int d = 0; d < r->ndim; d++) {
        uint64_t v;
        if (!take_u64(c, &v))
            return ta_error(TA_EFORMAT, "%s: record '%s': truncated shape", fn, r->name);
        if (v > (uint64_t)INT64_MAX)
            return ta_error(TA_EFORMAT, "%s: record '%s': negative extent in dim %d", fn,
                            r->name, d);
        r->shape[d] = (int64_t)v;
    }
    uint64_t nbytes;
    size_t want;
    if (!ta_shape_numel(&r->numel, r->ndim, r->shape) ||
        !ta_mul_size(&want, (size_t)r->numel, esize))
        return ta_error(TA_EFORMAT, "%s: record '%s': shape too large", fn, r->name);
    if (!take_u64(c, &nbytes) || nbytes != (uint64_t)want)
        return ta_error(TA_EFORMAT,
                        "%s: record '%s': data size field does not match the shape (%zu bytes)",
                        fn, r->name, want);
    if (!take(c, want, &p))
        return ta_error(TA_EFORMAT, "%s: record '%s': data truncated (%zu bytes wanted, %zu left)",
                        fn, r->name, want, c->size - c->pos);
    /* 64-byte aligned copy: tests hand these buffers to SIMD code. */
    void *data = aligned_alloc(64, (want + 63) / 64 * 64 + 64);
    if (!data) return ta_error(TA_ENOMEM, "%s: out of memory", fn);
    if (want) memcpy(data, p, want);
    r->data = data;
    return TA_OK;
}

static ta_status collect_cases(ta_fixture_file *f)
{
    f->cases = calloc((size_t)f->nrecords + 1, sizeof *f->cases);
    if (!f->cases) return ta_error(TA_ENOMEM, "ta_fixture_parse: out of memory");
    for (int i = 0; i < f->nrecords; i++) {
        const char *name = f->records[i].name;
        size_t n = strlen(name);
        if (n <= 5 || strcmp(name + n - 5, "/meta") != 0) continue;
        if (memchr(name, '/', n - 5) || strcmp(name, "_set/meta") == 0) continue;
        if (!(f->cases[f->ncases] = copy_text((const unsigned char *)name, n - 5)))
            return ta_error(TA_ENOMEM, "ta_fixture_parse: out of memory");
        f->ncases++;
    }
    return TA_OK;
}

ta_status ta_fixture_parse(ta_fixture_file **out, const void *bytes, size_t size)
{
    const char *fn = "ta_fixture_parse";
    if (!out) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    if (!bytes && size) return ta_error(TA_EINVAL, "%s: bytes is NULL", fn);
    if (!host_is_little_endian())
        return ta_error(TA_EUNSUPPORTED, "%s: big-endian hosts are not supported", fn);
    cursor c = {bytes, size, 0};
    const unsigned char *magic;
    uint32_t version, count;
    if (size < 16 || !take(&c, 4, &magic) || memcmp(magic, "TAFX", 4) != 0)
        return ta_error(TA_EFORMAT, "%s: not a .tafx file (%zu bytes, no TAFX magic)", fn, size);
    take_u32(&c, &version);
    if (version != TA_FIXTURE_VERSION)
        return ta_error(TA_EFORMAT, "%s: format version %u, this reader knows %u", fn,
                        (unsigned)version, TA_FIXTURE_VERSION);
    const unsigned char *tail = (const unsigned char *)bytes + size - 4;
    uint32_t stored = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 |
                      (uint32_t)tail[3] << 24;
    uint32_t crc = ta_fixture_crc32(bytes, size - 4);
    if (stored != crc)
        return ta_error(TA_EFORMAT, "%s: CRC-32 mismatch (stored %08x, computed %08x): "
                        "the file is truncated or corrupted", fn, (unsigned)stored, (unsigned)crc);
    take_u32(&c, &count);
    c.size = size - 4; /* the records end where the CRC begins */
    if (count > (c.size - c.pos) / FX_MIN_RECORD)
        return ta_error(TA_EFORMAT, "%s: record count %u does not fit in %zu bytes", fn,
                        (unsigned)count, size);

    ta_fixture_file *f = calloc(1, sizeof *f);
    if (!f) return ta_error(TA_ENOMEM, "%s: out of memory", fn);
    f->version = version;
    f->records = calloc((size_t)count + 1, sizeof *f->records);
    if (!f->records) {
        free(f);
        return ta_error(TA_ENOMEM, "%s: out of memory", fn);
    }
    ta_status st = TA_OK;
    for (uint32_t i = 0; i < count && st == TA_OK; i++) {
        f->nrecords = (int)i + 1; /* so close frees a half-parsed record */
        st = parse_record(&f->records[i], &c, (int)i);
        for (uint32_t j = 0; j < i && st == TA_OK; j++)
            if (strcmp(f->records[j].name, f->records[i].name) == 0)
                st = ta_error(TA_EFORMAT, "%s: duplicate record name '%s'", fn,
                              f->records[i].name);
    }
    if (st == TA_OK && c.pos != c.size)
        st = ta_error(TA_EFORMAT, "%s: %zu stray bytes after the last record", fn,
                      c.size - c.pos);
    if (st == TA_OK) st = collect_cases(f);
    if (st != TA_OK) {
        ta_fixture_close(f);
        return st;
    }
    *out = f;
    return TA_OK;
}

/* ------------------------------------------------------------ files */

static ta_status fixture_path(char *buf, size_t size, const char *name)
{
    int n = strchr(name, '/') ? snprintf(buf, size, "%s", name)
                              : snprintf(buf, size, "%s/%s", TA_FIXTURE_DIR, name);
    if (n < 0 || (size_t)n >= size)
        return ta_error(TA_EINVAL, "ta_fixture_open: path too long for '%s'", name);
    return TA_OK;
}

ta_status ta_fixture_read_bytes(unsigned char **bytes, size_t *size, const char *name)
{
    if (!bytes || !size || !name)
        return ta_error(TA_EINVAL, "ta_fixture_read_bytes: NULL argument");
    char path[4096];
    ta_status st = fixture_path(path, sizeof path, name);
    if (st) return st;
    FILE *fp = fopen(path, "rb");
    if (!fp) return ta_error(TA_EIO, "ta_fixture_read_bytes: cannot open %s", path);
    long len = -1;
    if (fseek(fp, 0, SEEK_END) == 0) len = ftell(fp);
    if (len < 0 || (size_t)len > FX_MAX_FILE || fseek(fp, 0, SEEK_SET) != 0) {
        fclose(fp);
        return ta_error(TA_EIO, "ta_fixture_read_bytes: cannot size %s", path);
    }
    unsigned char *buf = malloc((size_t)len + 1);
    if (!buf) {
        fclose(fp);
        return ta_error(TA_ENOMEM, "ta_fixture_read_bytes: out of memory for %s", path);
    }
    size_t got = fread(buf, 1, (size_t)len, fp);
    fclose(fp);
    if (got != (size_t)len) {
        free(buf);
        return ta_error(TA_EIO, "ta_fixture_read_bytes: short read on %s", path);
    }
    *bytes = buf;
    *size = got;
    return TA_OK;
}

ta_status ta_fixture_open(ta_fixture_file **out, const char *name)
{
    if (!out || !name) return ta_error(TA_EINVAL, "ta_fixture_open: NULL argument");
    unsigned char *bytes;
    size_t size;
    ta_status st = ta_fixture_read_bytes(&bytes, &size, name);
    if (st) return st;
    st = ta_fixture_parse(out, bytes, size);
    free(bytes);
    return st;
}

/* ------------------------------------------------------------ queries */

uint32_t ta_fixture_version(const ta_fixture_file *f) { return f ? f->version : 0; }

int ta_fixture_record_count(const ta_fixture_file *f) { return f ? f->nrecords : 0; }

const ta_fixture_record *ta_fixture_record_at(const ta_fixture_file *f, int i)
{
    return f && i >= 0 && i < f->nrecords ? &f->records[i] : NULL;
}

const ta_fixture_record *ta_fixture_find(const ta_fixture_file *f, const char *name)
{
    if (!f || !name) return NULL;
    for (int i = 0; i < f->nrecords; i++)
        if (strcmp(f->records[i].name, name) == 0) return &f->records[i];
    return NULL;
}

int ta_fixture_case_count(const ta_fixture_file *f) { return f ? f->ncases : 0; }

const char *ta_fixture_case_name(const ta_fixture_file *f, int i)
{
    return f && i >= 0 && i < f->ncases ? f->cases[i] : NULL;
}

const ta_fixture_record *ta_fixture_case_record(const ta_fixture_file *f,
                                                const char *case_name, const char *role)
{
    if (!f || !case_name || !role) return NULL;
    char name[FX_MAX_NAME + 1];
    int n = snprintf(name, sizeof name, "%s/%s", case_name, role);
    if (n < 0 || (size_t)n >= sizeof name) return NULL;
    return ta_fixture_find(f, name);
}

const char *ta_fixture_case_meta(const ta_fixture_file *f, const char *case_name)
{
    const ta_fixture_record *r = ta_fixture_case_record(f, case_name, "meta");
    return r ? r->meta : "";
}

int ta_fixture_meta_get(const char *meta, const char *key, char *buf, size_t size)
{
    if (buf && size) buf[0] = '\0';
    if (!meta || !key) return 0;
    size_t klen = strlen(key);
    for (const char *line = meta; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > klen && strncmp(line, key, klen) == 0 && line[klen] == '=') {
            if (buf && size) {
                size_t v = len - klen - 1;
                if (v > size - 1) v = size - 1;
                memcpy(buf, line + klen + 1, v);
                buf[v] = '\0';
            }
            return 1;
        }
        line += len + (end ? 1 : 0);
    }
    return 0;
}

int ta_fixture_meta_ints(const char *meta, const char *key, int64_t *vals, int cap)
{
    char buf[1024];
    if (!ta_fixture_meta_get(meta, key, buf, sizeof buf)) return -1;
    int n = 0;
    const char *p = buf;
    if (!*p) return 0;
    for (;;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || n >= cap) return -1;
        vals[n++] = (int64_t)v;
        if (*end == '\0') return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

/* ------------------------------------------------------------ values */

static double value_at(const ta_fixture_record *r, int64_t i)
{
    switch (r->dtype) {
    case TA_FIXTURE_F32: return ((const float *)r->data)[i];
    case TA_FIXTURE_F64: return ((const double *)r->data)[i];
    case TA_FIXTURE_I64: return (double)((const int64_t *)r->data)[i];
    case TA_FIXTURE_U8: return ((const unsigned char *)r->data)[i];
    case TA_FIXTURE_I32: return ((const int32_t *)r->data)[i];
    }
    return 0.0;
}

ta_status ta_fixture_tensor(ta_tensor *t, const ta_fixture_record *r)
{
    if (!t || !r) return ta_error(TA_EINVAL, "ta_fixture_tensor: NULL argument (missing record?)");
    ta_tensor tmp;
    ta_status st = ta_tensor_empty(&tmp, r->ndim, r->shape);
    if (st) return st;
    float *dst = tmp.data;
    if (r->dtype == TA_FIXTURE_F32) {
        if (r->numel) memcpy(dst, r->data, (size_t)r->numel * sizeof(float));
    } else {
        for (int64_t i = 0; i < r->numel; i++) dst[i] = (float)value_at(r, i);
    }
    *t = tmp;
    return TA_OK;
}

ta_status ta_fixture_to_f64(double *dst, size_t cap, const ta_fixture_record *r)
{
    if (!r || (!dst && r->numel))
        return ta_error(TA_EINVAL, "ta_fixture_to_f64: NULL argument (missing record?)");
    if ((uint64_t)r->numel > (uint64_t)cap)
        return ta_error(TA_ESHAPE, "ta_fixture_to_f64: record '%s' has %lld values, room for %zu",
                        r->name, (long long)r->numel, cap);
    for (int64_t i = 0; i < r->numel; i++) dst[i] = value_at(r, i);
    return TA_OK;
}
