/* Scratch memory of one operation: the arena that lays it out and the block it lives in.
 *
 * Every operation that needs scratch plans it with one layout function run twice over a
 * ta_arena: once measuring (no memory: the size query, ta_<op>_workspace_size), once
 * carving a real block into the same pieces. Sizing and use can therefore never disagree.
 * A nested operation (the GEMM inside einsum, einsum inside the SDPA reference path, SDPA
 * inside a layer) takes a sub-arena of the size its own size query gives, so one call
 * acquires one block, before it writes any output:
 *
 *     static void layout(ta_arena *a, plan *p) {
 *         p->rows = TA_ARENA_TAKE(a, float, n);        // NULL while measuring
 *         p->gemm = ta_arena_sub(a, gemm_bytes);       // for a nested call
 *     }
 *     ta_arena m = ta_arena_measure(); layout(&m, &p);  // m.used: the bytes needed
 *     ta_scratch s; ta_scratch_acquire(&s, fn, ws, ta_arena_bytes(&m));
 *     ta_arena a = ta_arena_over(s.base, s.size); layout(&a, &p);
 *     ... run ...; ta_scratch_release(&s);
 *
 * The block is the caller's workspace when one is given (no allocation at all), else one
 * from the library: a block kept between calls when the request is at most
 * TA_SCRATCH_KEEP_MAX (fresh memory costs ~11 us per 4 KiB page to touch here, so steady
 * calls reuse touched memory), else a fresh allocation released at the end of the call. */
#ifndef TA_CORE_WORKSPACE_H
#define TA_CORE_WORKSPACE_H

#include "tensorattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TA_ARENA_ALIGN 64
/* Blocks up to this size are kept between calls (the fused paths need well under 1 MiB
 * per thread, GEMM packing ~5 MiB per thread); larger scratch (the reference path's
 * [B, H, Lq, Lk]) goes back to the allocator at the end of the call. */
#define TA_SCRATCH_KEEP_MAX ((size_t)64 << 20)

typedef struct ta_arena {
    unsigned char *base; /* NULL: measuring */
    size_t size;         /* capacity when carving */
    size_t used;         /* bytes laid out so far (each piece 64-byte aligned) */
    bool overflow;       /* a size did not fit size_t (or exceeded the capacity) */
} ta_arena;

static inline ta_arena ta_arena_measure(void) { return (ta_arena){0}; }
static inline ta_arena ta_arena_over(void *base, size_t size)
{
    return (ta_arena){.base = base, .size = size};
}

/* n elements of elem bytes, 64-byte aligned: a pointer into the block, or NULL while
 * measuring (n == 0 still advances by nothing and returns the current position). */
void *ta_arena_take(ta_arena *a, size_t n, size_t elem);
#define TA_ARENA_TAKE(a, type, n) ((type *)ta_arena_take((a), (size_t)(n), sizeof(type)))
/* n1 * n2 elements (n1, n2 >= 0), the product checked too: sizes made of a problem's
 * extents (a head_dim times a tile) cannot wrap before the arena sees them. */
void *ta_arena_take2(ta_arena *a, int64_t n1, int64_t n2, size_t elem);
#define TA_ARENA_TAKE2(a, type, n1, n2) ((type *)ta_arena_take2((a), (n1), (n2), sizeof(type)))

/* A sub-arena of `bytes` for a nested operation: it carves (or measures) inside it. If
 * the piece does not fit while carving, the sub-arena is marked overflowed. */
ta_arena ta_arena_sub(ta_arena *a, size_t bytes);

/* The bytes a measured layout needs (SIZE_MAX when it overflowed). */
static inline size_t ta_arena_bytes(const ta_arena *a) { return a->overflow ? SIZE_MAX : a->used; }

/* The bytes a caller's workspace must hold for `needed` bytes of layout: room to align
 * any pointer up to 64 bytes (what the public _workspace_size queries return). */
size_t ta_workspace_bytes(size_t needed);

/* TA_EINVAL "fn: the workspace overlaps <name>" when a caller's workspace (ws->data set)
 * shares a byte with one of the n tensors (NULL entries and tensors without elements
 * are skipped): the call would write its scratch over them. */
ta_status ta_workspace_check(const char *fn, const ta_workspace *ws, int n,
                             const ta_tensor *const *t, const char *const *names);

/* The same for an argument that is no tensor (key lengths, offsets, a block table):
 * `bytes` bytes from p (NULL or 0 bytes: nothing to check). The call reads these while
 * it runs, after its scratch is written: a workspace over them changes what it reads. */
ta_status ta_workspace_check_bytes(const char *fn, const ta_workspace *ws, const void *p,
                                   size_t bytes, const char *name);

/* The block one call runs in. */
typedef struct ta_scratch {
    void *base;      /* 64-byte aligned */
    size_t size;
    void *alloc;     /* what to give back: NULL for a caller's workspace */
    size_t alloc_size;
} ta_scratch;

/* Acquires `bytes` of scratch for fn: inside *ws when ws is non-NULL and ws->data is set
 * (it must hold ta_workspace_bytes(bytes); TA_EINVAL naming fn and both sizes if not),
 * else from the library (TA_ENOMEM when bytes is SIZE_MAX or an allocation fails). With
 * bytes == 0 nothing is acquired. */
ta_status ta_scratch_acquire(ta_scratch *s, const char *fn, const ta_workspace *ws,
                             size_t bytes);
/* Gives the block back (a kept block returns to the cache). */
void ta_scratch_release(ta_scratch *s);
/* Frees the block kept between calls (ta_set_allocator does it before switching hooks;
 * tests that count allocations call it to start from nothing). */
void ta_scratch_cache_release(void);

#endif
