/* features.h -- library features the Python module passes on once the C library has them.
 *
 * include/tensorattn.h already declares issue 11's and issue 12's API (varlen batches, the
 * KV cache, float16/bfloat16 tensors, window/softcap/ALiBi), but until a feature is
 * implemented the library ignores its option fields or lacks its symbols, so the module
 * refuses the feature (NotImplementedError naming it) instead of giving a wrong answer.
 * The glue for each is written and compiled already; when a feature lands in the
 * library, set its switch to 1 here (and nothing else), rebuild, and run the pytest
 * suite: the tests of python/tests/test_pending.py then run instead of checking the
 * refusal. tensorattn._C.features reports these switches to Python. */
#ifndef TA_PY_FEATURES_H
#define TA_PY_FEATURES_H

/* float16 and bfloat16 Q, K, V, O (and gradients) in ta_sdpa / ta_sdpa_backward;
 * ta_tensor_from_buffer_dtype and ta_convert exist (issue 11). */
#ifndef TA_PY_HAVE_HALF
#define TA_PY_HAVE_HALF 1
#endif
/* opts.cu_seqlens_q / cu_seqlens_k / num_seqs in ta_sdpa and ta_sdpa_backward (issue 11). */
#ifndef TA_PY_HAVE_VARLEN
#define TA_PY_HAVE_VARLEN 1
#endif
/* ta_sdpa_kvcache, contiguous and paged (issue 11). */
#ifndef TA_PY_HAVE_KVCACHE
#define TA_PY_HAVE_KVCACHE 1
#endif
/* opts.has_window / window_left / window_right (issue 12). */
#ifndef TA_PY_HAVE_WINDOW
#define TA_PY_HAVE_WINDOW 1
#endif
/* opts.softcap (issue 12). */
#ifndef TA_PY_HAVE_SOFTCAP
#define TA_PY_HAVE_SOFTCAP 1
#endif
/* opts.alibi_slopes (issue 12). */
#ifndef TA_PY_HAVE_ALIBI
#define TA_PY_HAVE_ALIBI 1
#endif

#endif /* TA_PY_FEATURES_H */
