/* dtypes: sizes, names, argument checks and conversions (the public ta_convert and the
 * internal strided rows that tensors, files and SDPA share). The rounding rules are in
 * dtype.h; the vector converters in the kernel table (docs/kernels.md, "Conversions"). */
#include "core/core.h"
#include "core/dtype.h"
#include "kernels/kernels.h"

#include <string.h>

size_t ta_dtype_size(ta_dtype dtype) { return ta_elem_size(dtype); }

const char *ta_dtype_name(ta_dtype dtype)
{
    switch (dtype) {
    case TA_F32: return "f32";
    case TA_F64: return "f64";
    case TA_F16: return "f16";
    case TA_BF16: return "bf16";
    }
    return "unknown";
}

const char *ta_dtype_list(unsigned accept)
{
    switch (accept) {
    case TA_ACCEPT_F32: return "float32";
    case TA_ACCEPT_STORAGE: return "f32, f16 or bf16";
    default: return "f32, f16, bf16 or f64";
    }
}

ta_status ta_dtype_check(const char *fn, const char *what, ta_dtype dt, unsigned accept)
{
    if (!ta_dtype_valid(dt))
        return ta_error(TA_EINVAL, "%s: %s = %d is not a ta_dtype", fn, what, (int)dt);
    if (!(accept >> dt & 1u))
        return ta_error(TA_EUNSUPPORTED, "%s: %s is %s; %s takes %s", fn, what,
                        ta_dtype_name(dt), fn, ta_dtype_list(accept));
    return TA_OK;
}

/* One element of any dtype as a double (exact), and a double stored rounded once. */
static double load_f64(const unsigned char *p, ta_dtype dt)
{
    if (dt != TA_F64) return ta_dtype_load(p, dt);
    double d;
    memcpy(&d, p, 8);
    return d;
}

static void store_f64(unsigned char *p, ta_dtype dt, double d)
{
    uint16_t h;
    float f;
    switch (dt) {
    case TA_F16: h = ta_f64_to_f16(d); memcpy(p, &h, 2); break;
    case TA_BF16: h = ta_f64_to_bf16(d); memcpy(p, &h, 2); break;
    case TA_F64: memcpy(p, &d, 8); break;
    default: f = (float)d; memcpy(p, &f, 4); break;
    }
}

/* The same dtype: a copy of n elements of size bytes. */
static void copy_strided(unsigned char *d, int64_t ds, const unsigned char *s, int64_t ss,
                         int64_t n, size_t size)
{
    if (ds == 1 && ss == 1) {
        if (d != s) memmove(d, s, (size_t)n * size);
        return;
    }
    int64_t dstep = ds * (int64_t)size, sstep = ss * (int64_t)size;
    /* constant sizes, so that each memcpy is one load and one store */
    switch (size) {
    case 2: for (int64_t j = 0; j < n; j++) memcpy(d + j * dstep, s + j * sstep, 2); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(d + j * dstep, s + j * sstep, 4); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(d + j * dstep, s + j * sstep, 8); break;
    }
}

/* Contiguous runs through the table's vector converters; returns 0 when the pair has
 * none (a float64 side). */
ta_widen_fn ta_widen_kernel(ta_dtype from)
{
    const ta_kernels *k = ta_kernels_active();
    return from == TA_F16 ? k->cvt_f16_f32 : from == TA_BF16 ? k->cvt_bf16_f32 : NULL;
}

static int convert_vector(void *dst, ta_dtype to, const void *src, ta_dtype from, int64_t n)
{
    const ta_kernels *k = ta_kernels_active();
    if (from == TA_F32 && to == TA_F16) k->cvt_f32_f16(dst, src, n);
    else if (from == TA_F32 && to == TA_BF16) k->cvt_f32_bf16(dst, src, n);
    else if (to == TA_F32 && ta_widen_kernel(from)) ta_widen_kernel(from)(dst, src, n);
    else if ((from == TA_F16 && to == TA_BF16) || (from == TA_BF16 && to == TA_F16)) {
        /* widening is exact, so this rounds once */
        float buf[512];
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i += 512) {
            int64_t m = TA_MIN((int64_t)512, n - i);
            ta_widen_kernel(from)(buf, s + i, m);
            (to == TA_F16 ? k->cvt_f32_f16 : k->cvt_f32_bf16)(d + i, buf, m);
        }
    } else {
        return 0;
    }
    return 1;
}

void ta_convert_strided(void *dst, ta_dtype to, int64_t ds, const void *src, ta_dtype from,
                        int64_t ss, int64_t n)
{
    if (n <= 0) return;
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t dsize = ta_dtype_size(to), ssize = ta_dtype_size(from);
    if (to == from) {
        copy_strided(d, ds, s, ss, n, dsize);
        return;
    }
    if (ds == 1 && ss == 1 && convert_vector(dst, to, src, from, n)) return;
    int64_t dstep = ds * (int64_t)dsize, sstep = ss * (int64_t)ssize;
    if (to != TA_F64 && from != TA_F64) {
        /* float32 holds every value of the narrower types: one rounding at most */
        for (int64_t j = 0; j < n; j++) ta_dtype_store(d + j * dstep, to, ta_dtype_load(s + j * sstep, from));
        return;
    }
    for (int64_t j = 0; j < n; j++) store_f64(d + j * dstep, to, load_f64(s + j * sstep, from));
}

ta_status ta_convert(void *dst, ta_dtype to, const void *src, ta_dtype from, size_t n)
{
    const char *fn = "ta_convert";
    ta_status st = ta_dtype_check(fn, "to", to, TA_ACCEPT_ANY);
    if (!st) st = ta_dtype_check(fn, "from", from, TA_ACCEPT_ANY);
    if (st) return st;
    if (n == 0) return TA_OK;
    if (!dst || !src) return ta_error(TA_EINVAL, "%s: %s is NULL", fn, !dst ? "dst" : "src");
    size_t dbytes, sbytes;
    if (n > (size_t)INT64_MAX || !ta_mul_size(&dbytes, n, ta_dtype_size(to)) ||
        !ta_mul_size(&sbytes, n, ta_dtype_size(from)))
        return ta_error(TA_EINVAL, "%s: n = %zu elements do not fit the address space", fn, n);
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d == s && to == from) return TA_OK;
    if (d < s + sbytes && s < d + dbytes)
        return ta_error(TA_EINVAL, "%s: dst and src overlap", fn);
    ta_convert_strided(dst, to, 1, src, from, 1, (int64_t)n);
    return TA_OK;
}
