/* Whole-or-nothing file writes, tensor serialisation and half-precision decoding shared
 * by the .npy and .safetensors writers and readers. */
#include "io/io_internal.h"

#include "core/tensor_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The process umask without changing it: umask(2) can only be read by setting it,
 * which races with other threads, so read it from /proc (Linux >= 4.7). */
static mode_t current_umask(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    mode_t mask = 022;
    if (!fp) return mask;
    char line[256];
    while (fgets(line, sizeof line, fp)) {
        unsigned int m;
        if (sscanf(line, "Umask: %o", &m) == 1) {
            mask = (mode_t)m;
            break;
        }
    }
    fclose(fp);
    return mask;
}

ta_status ta_atomic_open(ta_atomic_file *f, const char *fn, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fn = fn;
    f->path = path;
    size_t len = strlen(path);
    static const char suffix[] = ".tmp.XXXXXX";
    f->tmp_path = ta_alloc(len + sizeof suffix);
    if (!f->tmp_path) return TA_ENOMEM;
    memcpy(f->tmp_path, path, len);
    memcpy(f->tmp_path + len, suffix, sizeof suffix);
    int fd = mkstemp(f->tmp_path);
    if (fd < 0) {
        int e = errno;
        ta_free(f->tmp_path);
        f->tmp_path = NULL;
        return ta_error(TA_EIO, "%s: %s: cannot create a temporary file beside it: %s", fn,
                        path, strerror(e));
    }
    /* mkstemp makes the file 0600; give it the mode open(path, O_CREAT, 0666) would. */
    if (fchmod(fd, 0666 & ~current_umask()) != 0 || !(f->fp = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(f->tmp_path);
        ta_free(f->tmp_path);
        f->tmp_path = NULL;
        return ta_error(TA_EIO, "%s: %s: cannot prepare the temporary file: %s", fn, path,
                        strerror(e));
    }
    return TA_OK;
}

void ta_atomic_abort(ta_atomic_file *f)
{
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
    if (f->tmp_path) {
        unlink(f->tmp_path);
        ta_free(f->tmp_path);
        f->tmp_path = NULL;
    }
}

ta_status ta_atomic_write(ta_atomic_file *f, const void *buf, size_t n)
{
    if (n == 0) return TA_OK;
    if (fwrite(buf, 1, n, f->fp) == n) return TA_OK;
    int e = errno;
    ta_atomic_abort(f);
    return ta_error(TA_EIO, "%s: %s: write failed: %s", f->fn, f->path, strerror(e));
}

ta_status ta_atomic_commit(ta_atomic_file *f)
{
    const char *what = "flush";
    if (fflush(f->fp) != 0) goto fail;
    what = "fsync";
    if (fsync(fileno(f->fp)) != 0) goto fail;
    what = "close";
    FILE *fp = f->fp;
    f->fp = NULL;
    if (fclose(fp) != 0) goto fail;
    what = "rename";
    if (rename(f->tmp_path, f->path) != 0) goto fail;
    ta_free(f->tmp_path);
    f->tmp_path = NULL;
    return TA_OK;
fail:;
    int e = errno;
    ta_atomic_abort(f);
    return ta_error(TA_EIO, "%s: %s: %s failed: %s", f->fn, f->path, what, strerror(e));
}

/* t: any shape and strides, float32. Rows of the last dimension are gathered into a
 * bounded buffer so a strided or broadcast view is written without a full copy. */
ta_status ta_atomic_write_tensor(ta_atomic_file *f, const ta_tensor *t)
{
    int64_t numel = ta_tensor_numel(t);
    if (numel == 0) return TA_OK;
    if (ta_tensor_is_contiguous(t))
        return ta_atomic_write(f, t->data, (size_t)numel * sizeof(float));
    float buf[4096]; /* 16 KiB: small enough for any thread's stack */
    const size_t cap = sizeof buf / sizeof buf[0];
    /* Iterate over all dims but the last; the last one is walked with its stride. */
    int outer = t->ndim - 1;
    int64_t idx[TA_MAX_DIMS] = {0};
    int64_t len = t->shape[t->ndim - 1], step = t->stride[t->ndim - 1];
    int64_t rows = numel / len;
    size_t used = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = t->data;
        for (int d = 0; d < outer; d++) row += idx[d] * t->stride[d];
        for (int64_t j = 0; j < len; j++) {
            buf[used++] = row[j * step];
            if (used == cap) {
                ta_status st = ta_atomic_write(f, buf, used * sizeof(float));
                if (st) return st;
                used = 0;
            }
        }
        ta_index_next(outer, t->shape, idx);
    }
    return ta_atomic_write(f, buf, used * sizeof(float));
}

float ta_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf, or NaN with its payload */
    } else if (exp != 0) {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign; /* +-0 */
    } else {
        /* Subnormal: mant * 2^-24. Normalise so the leading 1 moves to bit 10. */
        int e = -1;
        do {
            mant <<= 1;
            e++;
        } while (!(mant & 0x400u));
        bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float ta_bfloat16_to_float(uint16_t b)
{
    /* bfloat16 is the top half of a float32: exact for every pattern. */
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
