/* tensorattn bench: times GEMM, einsum and scaled dot-product attention (fused and
 * reference paths) on this machine and states each result as a fraction of the FMA peak
 * measured in the same run, and each fused attention case against the reference path
 * on the same inputs (bench/README.md has the method and the JSON schema). This file is
 * the command line and the order of a run; bench_internal.h says where the rest is. */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"
#include "bench_internal.h"
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int usage_error(const char *fmt, ...)
{
    /* through the command line's error line, which escapes what an argument quotes (a
     * newline in a --filter value split the line until session 37) */
    va_list ap;
    va_start(ap, fmt);
    char msg[CLI_WHY_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cli_error(CLI_USAGE, "%s (see tensorattn bench --help)", msg);
}

static void print_help(void)
{
    printf("usage: tensorattn bench [--quick] [--json FILE] [--threads N] [--filter SUBSTRING]\n"
           "                        [--list] [--peers] [--torch-python PYTHON]\n"
           "\n"
           "Measures the float32 FMA peak of this machine for every ISA it supports and its\n"
           "read bandwidth (a streaming read of 1 GiB), then times SGEMM (square 256..2048 and\n"
           "the seed's batched attention shapes), the seed's four einsums (B=32 H=8 L=512 D=64)\n"
           "and scaled dot-product attention (ta_sdpa, reference and fused paths: the seed\n"
           "example, its causal mask as opts.causal and as a tensor, an L sweep at constant work\n"
           "with D=64 and 128, GQA, decoding, batched decoding with ragged key lengths, a long\n"
           "causal sequence). Each case is checked before it is timed (against a float64 oracle;\n"
           "a fused case also against the reference output on the same inputs), warmed up, and\n"
           "run >= 5 times and >= 0.5 s (slow cases: 2 or 3 runs); the table gives the median,\n"
           "the minimum, the first (cold) call, GFLOP/s, the fraction of the active ISA's\n"
           "measured peak on the case's thread count, for decoding cases the GB/s of K, V, Q and\n"
           "O and its fraction of the read bandwidth, the speed-up over the reference path and\n"
           "the extra memory the call allocated. A reference whose [B,H,Lq,Lk] scratch would\n"
           "exceed 4 GiB reads \"skipped\"; every other case must run. Then every ratio\n"
           "between two cases, and every compute case's fraction of the peak (not the\n"
           "reference path's, not a memory-bound case's), is timed\n"
           "again in alternating rounds (against its partner; against the 20 ms peak\n"
           "measurements around each call), for a machine whose speed moves within the run.\n"
           "\n"
           "  --quick            2 timed runs, smaller sizes (no 2048, L<=256)\n"
           "  --json FILE        also write the results as JSON (schema: bench/README.md)\n"
           "  --threads N        threads for the library, the peak and the read bandwidth\n"
           "                     (default: all cores)\n"
           "  --filter SUBSTRING run only the cases whose name contains SUBSTRING\n"
           "                     (e.g. sdpa_, _fused, sgemm_; a comma-separated list:\n"
           "                     any of them, e.g. sdpa_seed_fused,sdpa_decode_fused)\n"
           "  --list             print the case names and exit\n"
           "  --peers            also time the seed's PyTorch code on the seed shapes\n"
           "                     (bench/peers/torch_seed.py with " BENCH_PYTHON "; skipped,\n"
           "                     with the reason, when python or torch is missing)\n"
           "  --torch-python PYTHON\n"
           "                     with --peers (implied): the peer is PyTorch 2.x's\n"
           "                     scaled_dot_product_attention, its CPU flash kernel, run by\n"
           "                     PYTHON (a venv with torch >= 2.1) on every attention case\n"
           "                     that ran, forward and backward (bench/peers/torch_sdpa.py);\n"
           "                     skipped, with the reason, when PYTHON lacks torch >= 2.1\n"
           "  --help             this text\n"
           "\n"
           "Exit status: 0 success, 1 a case failed (error or result check) or the JSON\n"
           "could not be written, 2 bad command line. Progress goes to stderr.\n");
}

/* Returns 0 to go on, 2 on a usage error, -1 when --help was printed. Options that
 * take a value accept "--opt VALUE" and "--opt=VALUE". */
static int parse_args(bench_config *cfg, int argc, char **argv)
{
    /* each option at most once, as every other command takes them */
    static const char *const once[] = {"--quick", "--list",    "--peers",  "--torch-python",
                                       "--json",  "--filter", "--threads"};
    unsigned seen = 0;
    for (int i = 1; i < argc; i++) {
        char key[32];
        const char *a = argv[i], *eq = strchr(a, '='), *val = NULL;
        size_t key_len = eq && a[0] == '-' ? (size_t)(eq - a) : strlen(a);
        if (key_len >= sizeof key) return usage_error("unknown option '%s' for bench", a);
        memcpy(key, a, key_len);
        key[key_len] = '\0';
        int takes = !strcmp(key, "--json") || !strcmp(key, "--threads") ||
                    !strcmp(key, "--filter") || !strcmp(key, "--torch-python");
        if (takes && eq && a[0] == '-') val = eq + 1;
        else if (takes && i + 1 < argc) val = argv[++i];
        else if (takes) return usage_error("%s needs a value", key);
        else if (key_len != strlen(a)) return usage_error("%s takes no value", key);
        for (unsigned k = 0; k < sizeof once / sizeof *once; k++)
            if (!strcmp(key, once[k])) {
                if (seen >> k & 1u) return usage_error("option %s given twice", key);
                seen |= 1u << k;
            }

        if (!strcmp(key, "--help") || !strcmp(key, "-h")) {
            print_help();
            return -1;
        } else if (!strcmp(key, "--quick")) {
            cfg->quick = 1;
        } else if (!strcmp(key, "--list")) {
            cfg->list = 1;
        } else if (!strcmp(key, "--peers")) {
            cfg->peers = 1;
        } else if (!strcmp(key, "--torch-python")) {
            struct stat st; /* a venv's python is a link: stat follows it */
            if (!*val || stat(val, &st) != 0 || !S_ISREG(st.st_mode) || access(val, X_OK) != 0)
                return usage_error("--torch-python '%s' is not an executable file", val);
            cfg->torch_python = val;
            cfg->peers = 1;
        } else if (!strcmp(key, "--json")) {
            if (!*val) return usage_error("--json needs a file name");
            struct stat st; /* checked again when written; here before minutes of runs */
            if (stat(val, &st) == 0 && !S_ISREG(st.st_mode))
                return usage_error("--json '%s' exists and is not a regular file (the report "
                                   "is renamed over it)", val);
            cfg->json_path = val;
        } else if (!strcmp(key, "--filter")) {
            cfg->filter = val;
        } else if (!strcmp(key, "--threads")) {
            char *end;
            errno = 0;
            long n = strtol(val, &end, 10);
            if (errno || end == val || *end || n < 1 || n > 4096)
                return usage_error("--threads must be an integer in [1, 4096], got '%s'", val);
            cfg->threads = (int)n;
        } else {
            return usage_error("unknown option '%s' for bench", a);
        }
    }
    return 0;
}

/* The thread count and the run counts; 2 (a usage error) when the library refuses the
 * thread count. */
static int configure(bench_config *cfg)
{
    if (cfg->threads && ta_set_num_threads(cfg->threads) != TA_OK) {
        fprintf(stderr, "tensorattn: error: %s\n", ta_last_error());
        return 2;
    }
    cfg->threads = ta_get_num_threads();
    cfg->min_runs = cfg->quick ? 2 : 5;
    cfg->min_seconds = cfg->quick ? 0.0 : 0.5;
    cfg->warmup_runs = cfg->quick ? 1 : 2;
    cfg->peak_seconds = cfg->quick ? 0.1 : 0.3;
    cfg->read_bytes = (int64_t)(cfg->quick ? 256 : 1024) << 20;
    cfg->read_runs = cfg->quick ? 3 : 5;
    cfg->latency_steps = cfg->quick ? 100000 : 1000000;
    return 0;
}

/* The peaks, the cases, the peer, the peaks again, then the report. The table is
 * printed at the end: its ratios need the peaks measured after the cases too. The
 * progress line on stderr shows the way there. Returns the exit status. */
static int run(bench_state *s)
{
    bench_config *cfg = &s->cfg;
    int rc = 0;
    if (bench_measure_machine(s)) return 1;
    if (bench_run_cases(s)) rc = 1;
    if (cfg->peers) bench_run_torch_peer(s);
    if (bench_recheck_peaks(s)) rc = 1;
    bench_finish_ratios(s);
    bench_finish_torch_ratios(s);
    bench_print_machine(s);
    bench_print_table(s);
    bench_print_torch(s);
    if (cfg->json_path && bench_write_json(s, cfg->json_path)) rc = 1;
    return rc;
}

int ta_bench_main(int argc, char **argv)
{
    /* First, before the library allocates anything (alloc_count.c). */
    bench_install_counting_allocator();
    bench_state *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "tensorattn: error: bench: out of memory\n");
        return 1;
    }
    int rc = parse_args(&s->cfg, argc, argv);
    if (rc == 0) rc = configure(&s->cfg);
    if (rc) {
        free(s);
        return rc < 0 ? 0 : rc;
    }
    s->kept_for = -1;
    bench_build_cases(s);
    int any = 0;
    for (int i = 0; i < s->ncases && !any; i++) any = bench_selected(s, i);
    if (s->cfg.list) {
        for (int i = 0; i < s->ncases; i++) printf("%s\n", s->cases[i].name);
    } else if (!any) {
        rc = usage_error("--filter '%s' matches no case name", s->cfg.filter);
    } else if (!(s->times = malloc(BENCH_MAX_RUNS * sizeof *s->times))) {
        fprintf(stderr, "tensorattn: error: bench: out of memory\n");
        rc = 1;
    } else {
        s->progress_tty = isatty(fileno(stderr));
        rc = run(s);
        bench_progress_clear(s);
    }
    cJSON_Delete(s->torch.rows);
    free(s->times);
    bench_cases_free(s);
    free(s);
    return rc;
}
