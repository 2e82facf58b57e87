/* The CPU predicates of the ISA table (isa_table.def's `supported` column): cpuid, and
 * xgetbv for whether the OS saves the wider registers. Built without vector flags. */
#include "kernels/kernels.h"

int ta_cpu_has_scalar(void) { return 1; }

#if !defined(__x86_64__) && !defined(__i386__)
int ta_cpu_is_intel(void) { return 0; }
int ta_cpu_amd_family(void) { return 0; }
int64_t ta_cpu_l2_bytes(void) { return 0; }
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <string.h>

static uint64_t xgetbv0(void)
{
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

/* AVX2 + FMA + F16C with the YMM state enabled by the OS; *xcr0 and *ebx7 (cpuid leaf
 * 7's ebx) for the AVX-512 test. */
static int has_avx2(uint64_t *xcr0, unsigned *ebx7)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx || !fma || !f16c) return 0;
    *xcr0 = xgetbv0();
    if ((*xcr0 & 0x6) != 0x6) return 0; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    *ebx7 = b;
    return (b >> 5) & 1;
}

int ta_cpu_has_avx2(void)
{
    uint64_t xcr0;
    unsigned b;
    return has_avx2(&xcr0, &b);
}

/* AVX-512 F, DQ, BW, VL (and AVX2: the table's parent) with opmask and ZMM state. */
int ta_cpu_has_avx512(void)
{
    uint64_t xcr0 = 0;
    unsigned b = 0;
    if (!has_avx2(&xcr0, &b)) return 0;
    int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    return f && dq && bw && vl && (xcr0 & 0xE6) == 0xE6;
}

/* AVX-512 (above) and AVX512_BF16: cpuid leaf 7, subleaf 1, eax bit 5. */
int ta_cpu_has_avx512bf16(void)
{
    unsigned a, b, c, d;
    if (!ta_cpu_has_avx512() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1) return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 5) & 1;
}
/* Whether cpuid leaf 0's vendor string is id (12 characters: ebx, edx, ecx). */
static int vendor_is(const char *id)
{
    unsigned a, r[3];
    if (!__get_cpuid(0, &a, &r[0], &r[2], &r[1])) return 0;
    return memcmp(r, id, 12) == 0;
}

/* An AMD CPU's family from cpuid leaf 1, base plus extended (0x19: Zen 3 and 4, 0x1A:
 * Zen 5); else 0. */
int ta_cpu_amd_family(void)
{
    unsigned a, b, c, d;
    if (!vendor_is("AuthenticAMD") || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int base = (int)((a >> 8) & 0xF);
    return base == 0xF ? base + (int)((a >> 20) & 0xFF) : base;
}

int ta_cpu_is_intel(void) { return vendor_is("GenuineIntel"); }

/* A core's L2 in bytes: cpuid leaf 0x80000006, ecx[31:16] in KiB (Intel and AMD alike);
 * 0 where the leaf is missing. */
int64_t ta_cpu_l2_bytes(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000006u) return 0;
    if (!__get_cpuid(0x80000006u, &a, &b, &c, &d)) return 0;
    return (int64_t)(c >> 16) * 1024;
}
#endif
