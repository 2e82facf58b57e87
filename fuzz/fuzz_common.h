/* Shared by the libFuzzer harnesses (and tests/test_regressions.c, which replays the
 * corpora and regression inputs through the same harnesses built with gcc): write an
 * input to an anonymous in-memory file and name it by a path the library can open. */
#ifndef TA_FUZZ_COMMON_H
#define TA_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* A memfd holding data; *path becomes "/proc/self/fd/N". Returns the fd or -1. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("ta_fuzz", 0);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
