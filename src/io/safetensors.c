/* .safetensors reader and writer (huggingface/safetensors, format as of 0.4):
 *   8 bytes   N, little-endian uint64
 *   N bytes   UTF-8 JSON object {"name": {"dtype": "F32", "shape": [2, 3],
 *             "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
 *   rest      the data area; offsets are relative to its start, tensors are C-order
 *             little-endian, and together they cover it exactly (no gaps, no overlap).
 * The header is parsed with cJSON and copied into a small table, so the JSON tree
 * lives only during ta_safetensors_open. */
#include "io/io_internal.h"

#include "core/tensor_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation's limit on N. */
#define ST_MAX_HEADER ((uint64_t)100000000)
/* Integers in the header arrive as doubles; beyond 2^53 they are not exact. */
#define ST_MAX_INT 9007199254740992.0

/* The format's dtypes; dtype: the ta_dtype it is, or -1 for those we do not read. The
 * first four, indexed by ta_dtype, name the dtypes the writer writes. */
static const struct st_dtype {
    const char *name;
    size_t size;
    int dtype;
} st_dtypes[] = {
    [TA_F32] = {"F32", 4, TA_F32},   [TA_F64] = {"F64", 8, TA_F64},
    [TA_F16] = {"F16", 2, TA_F16},   [TA_BF16] = {"BF16", 2, TA_BF16},
    {"BOOL", 1, -1},    {"U8", 1, -1},  {"I8", 1, -1},  {"F8_E4M3", 1, -1}, {"F8_E5M2", 1, -1},
    {"I16", 2, -1},     {"U16", 2, -1}, {"I32", 4, -1}, {"U32", 4, -1},     {"I64", 8, -1},
    {"U64", 8, -1},
};

typedef struct st_entry {
    char *name;
    const struct st_dtype *dtype;
    int ndim; /* > TA_MAX_DIMS: valid in the file, refused by get */
    int64_t shape[TA_MAX_DIMS];
    uint64_t begin, end; /* within the data area */
} st_entry;

struct ta_safetensors {
    int fd;
    char *path;
    uint64_t data_start; /* 8 + N */
    int count;
    st_entry *entries; /* sorted by name */
};

/* "fn: path: <message>". */
static ta_status st_fail(const char *fn, const char *path, ta_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ta_status st_fail(const char *fn, const char *path, ta_status code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ta_error(code, "%s: %s: %s", fn, path, msg);
}

/* Reads exactly n bytes at offset; a short read means the file is shorter than its
 * header says (or shrank since it was opened). */
static ta_status read_at(const char *fn, const char *path, int fd, void *dst, size_t n,
                         uint64_t offset)
{
    unsigned char *p = dst;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return st_fail(fn, path, TA_EIO, "read error at offset %llu: %s",
                           (unsigned long long)offset, strerror(errno));
        }
        if (got == 0)
            return st_fail(fn, path, TA_EFORMAT, "truncated file: no data at offset %llu",
                           (unsigned long long)offset);
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return TA_OK;
}

static void free_entries(st_entry *e, int n)
{
    if (!e) return;
    for (int i = 0; i < n; i++) ta_free(e[i].name);
    ta_free(e);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int cmp_offsets(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* A JSON number that is an exact non-negative integer <= 2^53. */
static bool json_uint(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!(v >= 0 && v <= ST_MAX_INT) || v != (double)(uint64_t)v) return false;
    *out = (uint64_t)v;
    return true;
}

/* One header entry into e (name already set), checked against the data size. */
static ta_status parse_entry(const char *fn, const char *path, st_entry *e, const cJSON *obj,
                             uint64_t data_size)
{
    const char *name = e->name;
    if (!cJSON_IsObject(obj))
        return st_fail(fn, path, TA_EFORMAT, "tensor '%s': header entry is not a JSON object",
                       name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(obj, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(obj, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(obj, "data_offsets");
    if (!cJSON_IsString(dt))
        return st_fail(fn, path, TA_EFORMAT, "tensor '%s': 'dtype' is missing or not a string",
                       name);
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(dt->valuestring, st_dtypes[i].name)) e->dtype = &st_dtypes[i];
    if (!e->dtype)
        return st_fail(fn, path, TA_EFORMAT, "tensor '%s': unknown dtype '%.40s'", name,
                       dt->valuestring);
    if (!cJSON_IsArray(shape))
        return st_fail(fn, path, TA_EFORMAT, "tensor '%s': 'shape' is missing or not an array",
                       name);
    uint64_t numel = 1;
    bool overflow = false, has_zero = false;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape)
    {
        uint64_t v;
        if (!json_uint(d, &v))
            return st_fail(fn, path, TA_EFORMAT,
                           "tensor '%s': shape entries must be integers in [0, 2^53]", name);
        if (e->ndim < TA_MAX_DIMS) e->shape[e->ndim] = (int64_t)v;
        e->ndim++;
        if (v == 0) has_zero = true;
        else if (numel > UINT64_MAX / v) overflow = true;
        numel *= v;
    }
    /* A zero dimension makes any product 0, however large the others. */
    if (has_zero) overflow = false, numel = 0;
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_uint(cJSON_GetArrayItem(offs, 0), &begin) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &end))
        return st_fail(fn, path, TA_EFORMAT,
                       "tensor '%s': 'data_offsets' must be [begin, end], two integers", name);
    if (!(begin <= end && end <= data_size))
        return st_fail(fn, path, TA_EFORMAT,
                       "tensor '%s': data_offsets [%llu, %llu] lie outside the data area of "
                       "%llu bytes",
                       name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_size);
    if (overflow || numel > UINT64_MAX / e->dtype->size || numel * e->dtype->size != end - begin) {
        char s[TA_SHAPE_STR_MAX];
        int nd = TA_MIN(e->ndim, TA_MAX_DIMS);
        return st_fail(fn, path, TA_EFORMAT,
                       "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape %s%s "
                       "of %s needs %s",
                       name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)(end - begin), ta_shape_str(s, sizeof s, nd, e->shape),
                       e->ndim > nd ? "..." : "", e->dtype->name,
                       overflow || numel > UINT64_MAX / e->dtype->size ? "more than 2^64"
                                                                        : "a different size");
    }
    e->begin = begin;
    e->end = end;
    return TA_OK;
}

/* The specification's layout rule: sorted by offset, each tensor starts where the
 * previous one ended and the last ends at the end of the data area. */
static ta_status check_layout(const char *fn, const char *path, st_entry *e, int n,
                              uint64_t data_size)
{
    const st_entry **order = ta_alloc(sizeof *order * (size_t)(n ? n : 1));
    if (!order) return TA_ENOMEM;
    for (int i = 0; i < n; i++) order[i] = &e[i];
    qsort(order, (size_t)n, sizeof *order, cmp_offsets);
    uint64_t pos = 0;
    const st_entry *prev = NULL;
    ta_status st = TA_OK;
    for (int i = 0; i < n && !st; i++) {
        if (order[i]->begin < pos)
            st = st_fail(fn, path, TA_EFORMAT, "tensors '%s' and '%s' overlap in the data area",
                         prev->name, order[i]->name);
        else if (order[i]->begin > pos)
            st = st_fail(fn, path, TA_EFORMAT,
                         "bytes [%llu, %llu) of the data area belong to no tensor",
                         (unsigned long long)pos, (unsigned long long)order[i]->begin);
        pos = order[i]->end;
        prev = order[i];
    }
    if (!st && pos != data_size)
        st = st_fail(fn, path, TA_EFORMAT,
                     "bytes [%llu, %llu) of the data area belong to no tensor",
                     (unsigned long long)pos, (unsigned long long)data_size);
    ta_free(order);
    return st;
}

/* Builds the entry table from the parsed header. */
static ta_status parse_table(const char *fn, const char *path, ta_safetensors *s,
                             const cJSON *root, uint64_t data_size)
{
    int n = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) if (strcmp(item->string, "__metadata__")) n++;
    st_entry *e = ta_alloc_zeroed(sizeof *e * (size_t)(n ? n : 1));
    if (!e) return TA_ENOMEM;
    int k = 0;
    ta_status st = TA_OK;
    cJSON_ArrayForEach(item, root)
    {
        if (!strcmp(item->string, "__metadata__")) continue;
        size_t len = strlen(item->string);
        if (!(e[k].name = ta_alloc(len + 1))) {
            st = TA_ENOMEM;
            break;
        }
        memcpy(e[k].name, item->string, len + 1);
        k++;
        if ((st = parse_entry(fn, path, &e[k - 1], item, data_size))) break;
    }
    if (!st) st = check_layout(fn, path, e, n, data_size);
    if (!st) {
        qsort(e, (size_t)n, sizeof *e, cmp_name);
        for (int i = 1; i < n && !st; i++)
            if (!strcmp(e[i - 1].name, e[i].name))
                st = st_fail(fn, path, TA_EFORMAT, "tensor name '%s' appears twice", e[i].name);
    }
    if (st) {
        free_entries(e, k);
        return st;
    }
    s->entries = e;
    s->count = n;
    return TA_OK;
}

/* Where NUL-terminated str stops being well-formed UTF-8 (RFC 3629: no overlongs, no
 * surrogates, <= U+10FFFF): the offset of the first byte of the bad sequence, or -1. */
static int64_t utf8_error_at(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        const unsigned char *at = s;
        unsigned c = *s++, n;
        uint32_t cp;
        if (c < 0x80) continue;
        if (c >= 0xc2 && c <= 0xdf) n = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) n = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) n = 3, cp = c & 0x07;
        else return at - (const unsigned char *)str;
        for (unsigned k = 0; k < n; k++, s++) {
            if ((*s & 0xc0) != 0x80) return at - (const unsigned char *)str;
            cp = cp << 6 | (*s & 0x3f);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return at - (const unsigned char *)str;
    }
    return -1;
}

/* Reads and parses the header of the open file fd of size file_size. */
/* Where valid JSON text h (n bytes) escapes a NUL (\u0000) inside a string, else -1:
 * cJSON decodes it into a NUL that ends the C string it hands over, so a name "a\u0000x"
 * would read as "a" (and a dtype "F32\u0000..." as "F32"). */
static int64_t escaped_nul(const char *h, size_t n)
{
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        if (h[i] == '"') in_string = !in_string;
        else if (in_string && h[i] == '\\' && i + 1 < n) {
            if (h[i + 1] == 'u' && i + 5 < n && !memcmp(h + i + 2, "0000", 4)) return (int64_t)i;
            i++; /* the escaped character (a quote or backslash among them) */
        }
    }
    return -1;
}

static ta_status read_header(const char *fn, const char *path, ta_safetensors *s,
                             uint64_t file_size)
{
    if (file_size < 8)
        return st_fail(fn, path, TA_EFORMAT,
                       "file is %llu bytes, too short for the 8-byte header length",
                       (unsigned long long)file_size);
    unsigned char lenb[8];
    ta_status st = read_at(fn, path, s->fd, lenb, 8, 0);
    if (st) return st;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
    if (hlen > file_size - 8)
        return st_fail(fn, path, TA_EFORMAT,
                       "header length %llu goes beyond the end of the file (%llu bytes)",
                       (unsigned long long)hlen, (unsigned long long)file_size);
    if (hlen > ST_MAX_HEADER)
        return st_fail(fn, path, TA_EFORMAT, "header length %llu is beyond the limit of %llu",
                       (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    char *h = ta_alloc((size_t)hlen + 1);
    if (!h) return TA_ENOMEM;
    st = read_at(fn, path, s->fd, h, (size_t)hlen, 8);
    cJSON *root = NULL;
    int64_t nul;
    if (!st) {
        h[hlen] = '\0';
        const char *end = NULL;
        root = cJSON_ParseWithOpts(h, &end, 1);
        size_t at = end ? (size_t)(end - h) : 0;
        if (!root)
            st = st_fail(fn, path, TA_EFORMAT, "header is not valid JSON (error at byte %zu of %llu)",
                         at, (unsigned long long)hlen);
        else if (at != hlen) /* the parse stopped at a NUL byte inside the header */
            st = st_fail(fn, path, TA_EFORMAT, "header has a NUL byte at byte %zu", at);
        else if ((nul = utf8_error_at(h)) >= 0) /* JSON is UTF-8 (RFC 8259); so says the
                                                  official reader too */
            st = st_fail(fn, path, TA_EFORMAT, "header is not valid UTF-8 (at byte %lld)",
                         (long long)nul);
        else if (!cJSON_IsObject(root))
            st = st_fail(fn, path, TA_EFORMAT, "header is not a JSON object");
        else if ((nul = escaped_nul(h, (size_t)hlen)) >= 0)
            st = st_fail(fn, path, TA_EFORMAT, "header has a string with an escaped NUL "
                         "(\\u0000) at byte %lld, which names and dtypes cannot hold",
                         (long long)nul);
    }
    ta_free(h);
    s->data_start = 8 + hlen;
    if (!st) st = parse_table(fn, path, s, root, file_size - 8 - hlen);
    cJSON_Delete(root);
    return st;
}

ta_status ta_safetensors_open(ta_safetensors **st, const char *path)
{
    const char *fn = "ta_safetensors_open";
    if (!st) return ta_error(TA_EINVAL, "%s: st is NULL", fn);
    if (!path || !*path) return ta_error(TA_EINVAL, "%s: path is NULL or empty", fn);
    ta_safetensors *s = ta_alloc_zeroed(sizeof *s);
    if (!s) return TA_ENOMEM;
    size_t len = strlen(path);
    s->fd = -1;
    if (!(s->path = ta_alloc(len + 1))) {
        ta_free(s);
        return TA_ENOMEM;
    }
    memcpy(s->path, path, len + 1);
    ta_status status;
    struct stat sb;
    /* O_NONBLOCK: opening a FIFO that no process writes would otherwise wait forever
     * for a file refused below anyway (it changes nothing for a regular file) */
    s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (s->fd < 0)
        status = st_fail(fn, path, TA_EIO, "cannot open: %s", strerror(errno));
    else if (fstat(s->fd, &sb) != 0)
        status = st_fail(fn, path, TA_EIO, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        status = st_fail(fn, path, TA_EIO, "not a regular file");
    else
        status = read_header(fn, path, s, (uint64_t)sb.st_size);
    if (status) {
        ta_safetensors_free(s);
        return status;
    }
    *st = s;
    return TA_OK;
}

void ta_safetensors_free(ta_safetensors *st)
{
    if (!st) return;
    if (st->fd >= 0) close(st->fd);
    free_entries(st->entries, st->count);
    ta_free(st->path);
    ta_free(st);
}

int ta_safetensors_count(const ta_safetensors *st) { return st ? st->count : 0; }

const char *ta_safetensors_name(const ta_safetensors *st, int i)
{
    if (!st || i < 0 || i >= st->count) return NULL;
    return st->entries[i].name;
}

int ta_safetensors_find(const ta_safetensors *st, const char *name)
{
    if (!st || !name) return -1;
    st_entry key = {.name = (char *)name};
    const st_entry *e = bsearch(&key, st->entries, (size_t)st->count, sizeof key, cmp_name);
    return e ? (int)(e - st->entries) : -1;
}

/* out: [shape of the entry], of dtype, C-contiguous, new: a copy when the file holds
 * that dtype, else converted in chunks (each value rounded once). */
static ta_status get(const char *fn, ta_tensor *out, const ta_safetensors *st, const char *name,
                     ta_dtype dtype)
{
    if (!out) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    if (!st) return ta_error(TA_EINVAL, "%s: st is NULL", fn);
    if (!name) return ta_error(TA_EINVAL, "%s: name is NULL", fn);
    ta_status status = ta_dtype_check(fn, "dtype", dtype, TA_ACCEPT_STORAGE);
    if (status) return status;
    int i = ta_safetensors_find(st, name);
    if (i < 0) return ta_error(TA_EINVAL, "%s: no tensor named '%s' in %s", fn, name, st->path);
    const st_entry *e = &st->entries[i];
    if (e->dtype->dtype < 0)
        return st_fail(fn, st->path, TA_EUNSUPPORTED,
                       "tensor '%s' has dtype %s; only F32, F16, BF16 and F64 can be read", name,
                       e->dtype->name);
    if (e->ndim > TA_MAX_DIMS)
        return st_fail(fn, st->path, TA_EUNSUPPORTED,
                       "tensor '%s' has %d dimensions; at most %d are supported", name, e->ndim,
                       TA_MAX_DIMS);
    ta_tensor t;
    if ((status = ta_tensor_empty_dtype(&t, dtype, e->ndim, e->shape))) return status;
    size_t n = (size_t)ta_tensor_numel(&t), size = e->dtype->size, osize = ta_dtype_size(dtype);
    ta_dtype from = (ta_dtype)e->dtype->dtype;
    uint64_t at = st->data_start + e->begin;
    if (from == dtype) {
        status = read_at(fn, st->path, st->fd, t.data, n * size, at);
    } else {
        unsigned char *buf = ta_alloc(TA_IO_CHUNK);
        if (!buf) status = TA_ENOMEM;
        size_t per = TA_IO_CHUNK / size;
        for (size_t done = 0; !status && done < n; done += per) {
            size_t k = TA_MIN(per, n - done);
            status = read_at(fn, st->path, st->fd, buf, k * size, at + done * size);
            if (!status)
                ta_convert_strided((unsigned char *)t.data + done * osize, dtype, 1, buf, from, 1,
                                   (int64_t)k);
        }
        ta_free(buf);
    }
    if (status) {
        ta_tensor_free(&t);
        return status;
    }
    *out = t;
    return TA_OK;
}

ta_status ta_safetensors_get(ta_tensor *out, const ta_safetensors *st, const char *name)
{
    return get("ta_safetensors_get", out, st, name, TA_F32);
}

ta_status ta_safetensors_get_dtype(ta_tensor *out, const ta_safetensors *st, const char *name,
                                   ta_dtype dtype)
{
    return get("ta_safetensors_get_dtype", out, st, name, dtype);
}

/* ------------------------------------------------------------------ writer */

/* A growing string through the allocation hook. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool failed;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = TA_MAX(2 * b->cap, b->len + n + 1);
        cap = TA_MAX(cap, (size_t)256);
        char *p = ta_alloc(cap);
        if (!p) {
            b->failed = true;
            return;
        }
        if (b->len) memcpy(p, b->p, b->len);
        ta_free(b->p);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* A JSON string literal; the name was checked to be UTF-8. */
static void sb_json_string(strbuf *b, const char *s)
{
    sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_add(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_add(b, esc, 6);
        } else {
            sb_add(b, (const char *)&c, 1);
        }
    }
    sb_add(b, "\"", 1);
}

static ta_status check_save_args(const char *fn, int n, const char *const *names,
                                 const ta_tensor *const *tensors)
{
    if (n < 0) return ta_error(TA_EINVAL, "%s: n must be >= 0, got %d", fn, n);
    if (n > 0 && (!names || !tensors))
        return ta_error(TA_EINVAL, "%s: %s is NULL", fn, !names ? "names" : "tensors");
    for (int i = 0; i < n; i++) {
        if (!names[i] || !*names[i])
            return ta_error(TA_EINVAL, "%s: names[%d] is NULL or empty", fn, i);
        if (!strcmp(names[i], "__metadata__"))
            return ta_error(TA_EINVAL, "%s: names[%d] is the reserved key '__metadata__'", fn, i);
        if (utf8_error_at(names[i]) >= 0)
            return ta_error(TA_EINVAL, "%s: names[%d] is not valid UTF-8", fn, i);
        /* Quadratic, but weight files hold at most thousands of tensors. */
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return ta_error(TA_EINVAL, "%s: names[%d] and names[%d] are both '%s'", fn, j, i,
                                names[i]);
        char arg[32];
        snprintf(arg, sizeof arg, "tensors[%d]", i);
        ta_status st = ta_tensor_check_dtypes(fn, arg, tensors[i], TA_ACCEPT_ANY);
        if (st) return st;
    }
    return TA_OK;
}

/* The padded header, or TA_ENOMEM / TA_EINVAL (total size overflow). */
static ta_status build_header(const char *fn, strbuf *b, int n, const char *const *names,
                              const ta_tensor *const *tensors)
{
    uint64_t offset = 0;
    char num[96];
    sb_str(b, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        const ta_tensor *t = tensors[i];
        uint64_t size = ta_dtype_size(t->dtype), bytes = (uint64_t)ta_tensor_numel(t) * size;
        if (bytes / size != (uint64_t)ta_tensor_numel(t) || offset + bytes < offset)
            return ta_error(TA_EINVAL, "%s: the tensors hold more than 2^64 bytes", fn);
        sb_str(b, ",");
        sb_json_string(b, names[i]);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, st_dtypes[t->dtype].name);
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            sb_str(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                 (unsigned long long)(offset + bytes));
        sb_str(b, num);
        offset += bytes;
    }
    sb_str(b, "}");
    /* Pad with spaces so the data area starts 8-byte aligned (8 + N, N % 8 == 0). */
    while (!b->failed && b->len % 8) sb_str(b, " ");
    return b->failed ? TA_ENOMEM : TA_OK;
}

ta_status ta_safetensors_save(const char *path, int n, const char *const *names,
                              const ta_tensor *const *tensors)
{
    const char *fn = "ta_safetensors_save";
    if (!path || !*path) return ta_error(TA_EINVAL, "%s: path is NULL or empty", fn);
    ta_status st = check_save_args(fn, n, names, tensors);
    if (st) return st;
    strbuf b = {0};
    if ((st = build_header(fn, &b, n, names, tensors))) {
        ta_free(b.p);
        return st;
    }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)b.len >> (8 * i));
    ta_atomic_file af;
    st = ta_atomic_open(&af, fn, path);
    if (!st) st = ta_atomic_write(&af, lenb, 8);
    if (!st) st = ta_atomic_write(&af, b.p, b.len);
    for (int i = 0; i < n && !st; i++) st = ta_atomic_write_tensor(&af, tensors[i], tensors[i]->dtype);
    if (!st) st = ta_atomic_commit(&af);
    ta_free(b.p);
    return st;
}
