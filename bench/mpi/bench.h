/* tigon_bench_mpi: what the measurement files share (see main.c). */
#ifndef TIGON_BENCH_MPI_H
#define TIGON_BENCH_MPI_H

#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_DATA = 1, TAG_ACK, TAG_STOP, TAG_CTS_A, TAG_CTS_B, TAG_BUF_A, TAG_BUF_B };

/* ---- the run's settings and buffers (common.c) ---- */
extern int rank;
extern int quick;
extern double budget_ns;  /* wall time one measurement should take */
extern long nmax_samples; /* cap on iterations of per-iteration-sampled loops */
extern double ns_per_unit; /* cost of one unit of work(), calibrated at start */
extern char *sbuf, *rbuf;
extern size_t buf_cap;
extern long *samples, *samples2;

/* ---- clocks and work, inline: they sit inside the timed loops ---- */
extern volatile double sink;

static inline double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Seed 002's Spin(D): busy-wait D ns of wall time. */
static inline void spin_ns(double d)
{
    double end = now_ns() + d;
    while (now_ns() < end)
        ;
}

/* CPU work in units (a dependent floating-point chain the compiler cannot drop): the
 * "compute" of the availability, double-buffering and EMP loops. Unlike spin_ns, time the
 * CPU is taken away (e.g. by an agent on the same core) makes it last longer. */
static inline void work(long units)
{
    double x = sink;
    for (long i = 0; i < units; i++)
        x = x * 0.9999999 + 1e-7;
    sink = x;
}

static inline long units_for_ns(double ns) { return (long)(ns / ns_per_unit + 0.5); }

/* ---- calibration, planning, output (common.c) ---- */
void calibrate(void);
long agree(long v);
double agree_d(double v);
long plan(double per_iter_ns, long nmin, long nmax);

/* A measurement run with n iterations; returns rank 0's wall time for it. */
typedef double (*meas_fn)(const void *ctx, long n);
long calibrated_n(meas_fn f, const void *ctx, long nmin, long nmax);

/* Arguments of a measurement, for calibrated_n. */
struct mctx {
    int size;
    double d;
    long a, b;
    long *arr;
    double *out;
};

void out_begin(const char *type);
void out_long(const char *k, long v);
void out_num(const char *k, double v);
void out_str(const char *k, const char *v);
void out_arr(const char *k, const long *a, long n);
void out_end(void);
void progress(const char *msg);

/* ---- the measurements, one file each ---- */
void logp(int size);
void bandwidth(int size);
void availability(void);
void double_buffering(void);
void emp(void);

#endif
