/* libFuzzer target: the einsum spec parser, binder and planner.
 * Input: byte 0 = flags (bit 0: two operands, bit 1: transpose operand a's last two dims,
 * bit 2: slice operand b with step 2 along dim 0, bit 3: also pass a preallocated out),
 * byte 1 = rank of a (0..4), byte 2 = rank of b (0..4), then one byte per dim (extent
 * 0..3), then the spec string (the rest, up to the first NUL). Ranks and extents are
 * small so every contraction is cheap (at most 3^8 products); values are seeded N(0,1).
 * Every call must return a status; a successful result must have the shape
 * ta_einsum_shape predicts, and einsum into a preallocated out must agree bitwise with
 * the allocating call. */
#include "tensorattn.h"

#include <stdlib.h>
#include <string.h>

static int make(ta_tensor *t, int nd, const uint8_t *ext, uint64_t seed)
{
    int64_t shape[4];
    for (int d = 0; d < nd; d++) shape[d] = ext[d] % 4;
    if (ta_tensor_empty(t, nd, shape) != TA_OK) return 0;
    ta_randn(t, seed);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    int flags = data[0], na = data[1] % 5, nb = data[2] % 5;
    size_t pos = 3;
    if (size < pos + (size_t)na + (size_t)nb) return 0;
    char spec[128];
    size_t slen = size - pos - (size_t)na - (size_t)nb;
    if (slen >= sizeof spec) slen = sizeof spec - 1;
    memcpy(spec, data + pos + na + nb, slen);
    spec[slen] = '\0';

    ta_tensor a = {0}, b = {0}, av, bv;
    if (!make(&a, na, data + pos, 1) || !make(&b, nb, data + pos + na, 2)) goto done;
    av = a;
    bv = b;
    if ((flags & 2) && na >= 2) ta_tensor_transpose(&av, &a, na - 2, na - 1);
    if ((flags & 4) && nb >= 1) ta_tensor_slice(&bv, &b, 0, 0, b.shape[0], 2);
    int two = flags & 1;

    int nd;
    int64_t shape[TA_MAX_DIMS];
    ta_status shape_st = ta_einsum_shape(&nd, shape, spec, &av, two ? &bv : NULL);
    ta_tensor out = {0};
    ta_status st = two ? ta_einsum_alloc(&out, spec, &av, &bv) : ta_einsum1_alloc(&out, spec, &av);
    if ((st == TA_OK) != (shape_st == TA_OK) && st != TA_ENOMEM) abort();
    if (st == TA_OK) {
        if (out.ndim != nd || memcmp(out.shape, shape, (size_t)nd * sizeof(int64_t)) != 0)
            abort();
        if (flags & 8) {
            ta_tensor out2;
            if (ta_tensor_full(&out2, nd, shape, 7.0f) == TA_OK) {
                ta_status st2 = two ? ta_einsum(&out2, spec, &av, &bv)
                                    : ta_einsum1(&out2, spec, &av);
                int64_t n = ta_tensor_numel(&out);
                if (st2 != TA_OK ||
                    (n && memcmp(out.data, out2.data, (size_t)n * sizeof(float)) != 0))
                    abort();
                ta_tensor_free(&out2);
            }
        }
    }
    ta_tensor_free(&out);
done:
    ta_tensor_free(&a);
    ta_tensor_free(&b);
    return 0;
}
