/* --json FILE: the report as JSON (schema version 3, bench/README.md), written whole. */
#define _POSIX_C_SOURCE 200809L

#include "bench_internal.h"
#include "io/io_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void bench_json_ints(cJSON *o, int n, const char *const keys[], const int64_t v[])
{
    for (int i = 0; i < n; i++) cJSON_AddNumberToObject(o, keys[i], (double)v[i]);
}

static cJSON *case_json(const bench_case *c)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "kind", c->kind->name);
    cJSON_AddStringToObject(o, "path", c->path);
    c->kind->shape_json(c, o);
    cJSON_AddNumberToObject(o, "threads", c->threads);
    cJSON_AddNumberToObject(o, "flops", c->flops);
    cJSON_AddStringToObject(o, "status", c->status);
    int ok = strcmp(c->status, "ok") == 0;
    if (!ok) cJSON_AddStringToObject(o, "error", c->error);
    /* Unmeasured numbers are null, never a made-up 0. */
#define NUM(key, v, have) \
    ((have) ? cJSON_AddNumberToObject(o, key, v) : cJSON_AddNullToObject(o, key))
    NUM("median_s", c->median_s, ok);
    NUM("min_s", c->min_s, ok);
    NUM("cold_s", c->cold_s, c->cold_s > 0.0);
    NUM("runs", (double)c->runs, ok);
    NUM("gflops", c->gflops, ok);
    NUM("peak_gflops", c->peak_gflops, ok);
    NUM("peak_fraction", c->peak_fraction, ok);
    NUM("peak_fraction_alternating", c->peak_fraction_alternating,
        isfinite(c->peak_fraction_alternating));
    NUM("peak_rounds", c->peak_rounds, c->peak_rounds > 0);
    /* sdpa outputs are of order 1: their error is absolute (bench/README.md). */
    NUM(c->kind->abs_err ? "max_abs_err" : "max_rel_err", c->max_rel_err,
        isfinite(c->max_rel_err) && c->max_rel_err >= 0.0 && strcmp(c->status, "skipped"));
    NUM("tolerance", c->tolerance, 1);
    if (c->twin >= 0) {
        NUM("max_abs_diff_vs_reference", c->max_abs_diff_ref, isfinite(c->max_abs_diff_ref));
        NUM("speedup_vs_reference", c->speedup_vs_reference, isfinite(c->speedup_vs_reference));
        NUM("speedup_vs_torch", c->speedup_vs_torch, isfinite(c->speedup_vs_torch));
    }
    if (c->bytes > 0.0) { /* a memory-bound case: bytes moved against the read bandwidth */
        NUM("bytes", c->bytes, 1);
        NUM("gbs", c->gbs, ok);
        NUM("read_bandwidth_gbs", c->read_gbs, c->read_gbs > 0.0);
        NUM("bandwidth_fraction", c->bandwidth_fraction, ok && isfinite(c->bandwidth_fraction));
        cJSON_AddBoolToObject(o, "fits_llc", c->fits_llc);
    }
    if (c->vs_causal[0]) NUM("ratio_vs_causal", c->ratio_vs_causal, isfinite(c->ratio_vs_causal));
    if (c->vs_case[0]) {
        cJSON_AddStringToObject(o, "vs_case", c->vs_case);
        NUM("vs_scale", c->vs_scale, 1);
        NUM(c->vs_key, c->ratio_vs, isfinite(c->ratio_vs));
    }
    if (c->vs_case[0] || c->vs_causal[0]) {
        char key[48];
        snprintf(key, sizeof key, "%s_alternating", c->vs_case[0] ? c->vs_key : "ratio_vs_causal");
        NUM(key, c->ratio_alternating, isfinite(c->ratio_alternating));
        NUM("ratio_rounds", c->ratio_rounds, c->ratio_rounds > 0);
    }
    NUM("extra_bytes", c->extra_bytes, ok && c->extra_bytes >= 0.0);
    NUM("extra_bytes_cold", c->extra_bytes_cold, c->cold_s > 0.0 && c->extra_bytes_cold >= 0.0);
#undef NUM
    return o;
}

/* "machine": the active ISA, the thread count, every peak measured and the read
 * bandwidth (null when it could not be measured). */
static void machine_json(const bench_state *s, cJSON *m)
{
    ta_isa act = ta_active_isa();
    cJSON_AddStringToObject(m, "isa", ta_isa_name(act));
    cJSON_AddNumberToObject(m, "threads", s->cfg.threads);
    cJSON_AddNumberToObject(m, "fma_peak_gflops", bench_known_peak(s, act, s->cfg.threads));
    cJSON_AddNumberToObject(m, "fma_peak_gflops_1thread", bench_known_peak(s, act, 1));
    cJSON_AddNumberToObject(m, "peak_spread", s->peak_spread);
    if (s->read_gbs > 0.0) cJSON_AddNumberToObject(m, "read_bandwidth_gbs", s->read_gbs);
    else cJSON_AddNullToObject(m, "read_bandwidth_gbs");
    if (s->read_gbs_1thread > 0.0)
        cJSON_AddNumberToObject(m, "read_bandwidth_gbs_1thread", s->read_gbs_1thread);
    else cJSON_AddNullToObject(m, "read_bandwidth_gbs_1thread");
    cJSON_AddNumberToObject(m, "read_bandwidth_spread", s->read_spread);
    if (s->read_latency_ns > 0.0) cJSON_AddNumberToObject(m, "read_latency_ns", s->read_latency_ns);
    else cJSON_AddNullToObject(m, "read_latency_ns");
    if (s->llc_bytes > 0) cJSON_AddNumberToObject(m, "llc_bytes", (double)s->llc_bytes);
    else cJSON_AddNullToObject(m, "llc_bytes");
    cJSON *peaks = cJSON_AddObjectToObject(m, "peaks");
    cJSON *peaks1 = cJSON_AddObjectToObject(m, "peaks_1thread");
    for (int i = 0; i < TA_ISA_COUNT && peaks && peaks1; i++) {
        if (!ta_cpu_supports((ta_isa)i)) continue;
        cJSON_AddNumberToObject(peaks, ta_isa_name((ta_isa)i),
                                bench_known_peak(s, (ta_isa)i, s->cfg.threads));
        cJSON_AddNumberToObject(peaks1, ta_isa_name((ta_isa)i),
                                bench_known_peak(s, (ta_isa)i, 1));
    }
}

/* "peers": {"torch": ...}, only with --peers. */
static int peers_json(const bench_state *s, cJSON *root)
{
    if (!s->torch.status) return 0;
    cJSON *peers = cJSON_AddObjectToObject(root, "peers");
    cJSON *torch = peers ? cJSON_AddObjectToObject(peers, "torch") : NULL;
    if (!torch) return -1;
    cJSON_AddStringToObject(torch, "status", s->torch.status);
    if (s->torch.rows) {
        cJSON_AddStringToObject(torch, "command", s->torch.command);
        cJSON_AddItemReferenceToObject(torch, "cases", s->torch.rows);
    } else {
        cJSON_AddStringToObject(torch, "reason", s->torch.reason);
    }
    return 0;
}

static cJSON *report_json(const bench_state *s)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    char when[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddNumberToObject(root, "version", 3);
    cJSON_AddStringToObject(root, "tensorattn", ta_version());
    cJSON_AddStringToObject(root, "created", when);
    cJSON_AddBoolToObject(root, "quick", s->cfg.quick);
    cJSON *m = cJSON_AddObjectToObject(root, "machine");
    cJSON *cases = cJSON_AddArrayToObject(root, "cases");
    if (!m || !cases) {
        cJSON_Delete(root);
        return NULL;
    }
    machine_json(s, m);
    if (peers_json(s, root)) {
        cJSON_Delete(root);
        return NULL;
    }
    for (int i = 0; i < s->ncases; i++) {
        if (!s->cases[i].status) continue; /* filtered out */
        cJSON *c = case_json(&s->cases[i]);
        if (!c) {
            cJSON_Delete(root);
            return NULL;
        }
        cJSON_AddItemToArray(cases, c);
    }
    return root;
}

/* Writes the report whole through the library's writer (ta_atomic_*: a temporary file
 * beside `path`, fsync, then rename), so a reader never sees half a file and a failed
 * run leaves the old one in place. */
int bench_write_json(const bench_state *s, const char *path)
{
    cJSON *root = report_json(s);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "tensorattn: error: bench: out of memory building the JSON report\n");
        return -1;
    }
    ta_atomic_file f;
    ta_status st = ta_atomic_open(&f, "bench", path);
    if (!st) st = ta_atomic_write(&f, text, strlen(text));
    if (!st) st = ta_atomic_write(&f, "\n", 1);
    if (!st) st = ta_atomic_commit(&f);
    cJSON_free(text);
    if (st) {
        fprintf(stderr, "tensorattn: error: %s\n",
                st == TA_ENOMEM ? "bench: out of memory writing the JSON report" : ta_last_error());
        return -1;
    }
    return 0;
}
