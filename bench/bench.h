/* tensorattn bench: the benchmark harness behind `tensorattn bench` (bench/README.md).
 * Uses only the public header. */
#ifndef TA_BENCH_H
#define TA_BENCH_H

/* Runs `tensorattn bench [--quick] [--json FILE] [--threads N] [--filter SUBSTRING]
 * [--list] [--peers]` (argv[0] is "bench"). Prints the machine section and one row per
 * case on stdout, a progress line on stderr. Returns 0 on success, 2 on a bad command
 * line (one "tensorattn: error: ..." line on stderr), 1 when a case fails (allocation,
 * a library error, TA_EUNSUPPORTED included, a result check) or the JSON file cannot be
 * written; a case that the bench skips (a reference too big to run) is not a failure.
 * Installs a counting allocator (ta_set_allocator) first thing and leaves it in place:
 * call it before anything else in the process has allocated through the library. */
int ta_bench_main(int argc, char **argv);

#endif
