/* Helpers shared by the MPI test programs: checks that abort the job with a message, and
   deterministic payload patterns. Each program prints "OK <name>" from rank 0 on success. */
#ifndef TIGON_TEST_COMMON_H
#define TIGON_TEST_COMMON_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            int r_;                                                                        \
            MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                            \
            fprintf(stderr, "FAIL rank %d %s:%d: %s: ", r_, __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            fflush(stderr);                                                                \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)

#define MPI_OK(call)                                                                       \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        CHECK(rc_ == MPI_SUCCESS, "%s returned %d", #call, rc_);                           \
    } while (0)

/* Byte i of message `seed`. */
static inline unsigned char pattern(uint32_t seed, size_t i)
{
    uint32_t x = seed * 2654435761u + (uint32_t) i * 40503u + (uint32_t) (i >> 16);
    return (unsigned char) (x ^ (x >> 13) ^ (x >> 24));
}

static inline void fill(unsigned char *b, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) b[i] = pattern(seed, i);
}

/* Index of the first wrong byte, or -1. */
static inline long verify(const unsigned char *b, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(seed, i)) return (long) i;
    return -1;
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    CHECK(p != NULL, "malloc(%zu)", n);
    return p;
}

/* A small deterministic PRNG (xorshift32). */
static inline uint32_t rnd(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static inline void ok(const char *name)
{
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 0) {
        printf("OK %s\n", name);
        fflush(stdout);
    }
}

#endif
