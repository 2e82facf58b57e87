/* A call's buffer, kept between calls, and views of it. */
#include "dist/cp_internal.h"

#include <stdatomic.h>

/* The buffer kept between calls. A call's buffers (K/V blocks, accumulators, head shards)
 * are tens to hundreds of MiB; fresh pages cost the kernel's zeroing (about 10% of a call
 * at L = 8192 in a profile), so one buffer stays with the process, used by one call at a
 * time (a concurrent call takes its own), released at MPI_Finalize (an attribute of
 * MPI_COMM_SELF, deleted first thing there) or by ta_cp_release. */
static ta_tensor kept;
static atomic_flag kept_busy = ATOMIC_FLAG_INIT;
static int kept_keyval = MPI_KEYVAL_INVALID;

void ta_cp_release(void)
{
    if (atomic_flag_test_and_set(&kept_busy)) return; /* a call holds it */
    ta_tensor_free(&kept);
    atomic_flag_clear(&kept_busy);
}

static int release_at_finalize(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm;
    (void)keyval;
    (void)value;
    (void)extra;
    ta_cp_release();
    return MPI_SUCCESS;
}

ta_status cp_buffer(cp_ctx *ctx, int64_t n, float **data)
{
    const int64_t shape[1] = {n > 0 ? n : 1};
    ta_status st;
    if (atomic_flag_test_and_set(&kept_busy)) {
        st = ta_tensor_empty(&ctx->buf, 1, shape);
    } else {
        ctx->holds_kept = true;
        if (!kept.data || ta_tensor_numel(&kept) < shape[0]) {
            ta_tensor_free(&kept);
            st = ta_tensor_empty(&kept, 1, shape);
            if (!st && kept_keyval == MPI_KEYVAL_INVALID &&
                MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, release_at_finalize, &kept_keyval,
                                       NULL) == MPI_SUCCESS)
                MPI_Comm_set_attr(MPI_COMM_SELF, kept_keyval, NULL);
        } else {
            st = TA_OK;
        }
        ctx->buf = kept;
        ctx->buf.owned = NULL; /* a view: cp_end lets go of it */
    }
    *data = st ? NULL : ctx->buf.data;
    return st;
}

void cp_buffer_done(cp_ctx *ctx)
{
    ta_tensor_free(&ctx->buf);
    if (ctx->holds_kept) atomic_flag_clear(&kept_busy);
    ctx->holds_kept = false;
}

ta_tensor cp_view4(float *data, int64_t s0, int64_t s1, int64_t s2, int64_t s3)
{
    const int64_t shape[4] = {s0, s1, s2, s3};
    ta_tensor t = {0};
    ta_tensor_from_buffer(&t, data, 4, shape, NULL); /* cannot fail: data and shape are ours */
    return t;
}

ta_tensor cp_rows(const ta_tensor *t, int64_t r0, int64_t n)
{
    ta_tensor v = {0};
    ta_tensor_slice(&v, t, 2, r0, r0 + n, 1); /* in range by construction */
    return v;
}
