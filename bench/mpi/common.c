/* tigon_bench_mpi: what every measurement uses: clocks, calibrated work, the iteration
 * planner both ranks agree on, and the JSON output (see main.c). */
#include "bench.h"

int rank;
int quick;
double budget_ns;
long nmax_samples;
double ns_per_unit;
char *sbuf, *rbuf;
size_t buf_cap;
long *samples, *samples2;

volatile double sink = 1.0;

/* The fastest of many short runs: on a shared machine a long run is rarely left alone. */
void calibrate(void)
{
    double best = 1e18;
    long u = 100000;
    for (int k = 0; k < 50; k++) {
        double t = now_ns();
        work(u);
        t = now_ns() - t;
        if (t < best)
            best = t;
    }
    ns_per_unit = best / (double)u;
}

/* Rank 0's decision, shared with rank 1. */
long agree(long v)
{
    MPI_Bcast(&v, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return v;
}
double agree_d(double v)
{
    MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return v;
}

/* Iterations that fill the budget, given the pilot's time per iteration. */
long plan(double per_iter_ns, long nmin, long nmax)
{
    long n = 0;
    if (rank == 0) {
        double want = per_iter_ns > 0 ? budget_ns / per_iter_ns : (double)nmax;
        n = want > (double)nmax ? nmax : (long)want;
        if (n < nmin)
            n = nmin;
    }
    return agree(n);
}

/* Grows n (x4, from 1) until a run takes an eighth of the budget (these runs also warm up
 * connections and caches), then returns the n that fills the budget, agreed by both
 * ranks. A slow transport gets fewer iterations, not a longer run. */
long calibrated_n(meas_fn f, const void *ctx, long nmin, long nmax)
{
    for (long n = 1;; n *= 4) {
        double t = f(ctx, n);
        long more = agree(rank == 0 && t < budget_ns / 8 && n * 4 <= nmax);
        if (!more)
            return plan(t / (double)n, nmin, nmax);
    }
}

void out_begin(const char *type) { printf("{\"t\":\"%s\"", type); }
void out_long(const char *k, long v) { printf(",\"%s\":%ld", k, v); }
void out_num(const char *k, double v) { printf(",\"%s\":%.1f", k, v); }
void out_str(const char *k, const char *v) { printf(",\"%s\":\"%s\"", k, v); }
void out_arr(const char *k, const long *a, long n)
{
    printf(",\"%s\":[", k);
    for (long i = 0; i < n; i++)
        printf(i ? ",%ld" : "%ld", a[i]);
    printf("]");
}
void out_end(void)
{
    printf("}\n");
    fflush(stdout);
}
void progress(const char *msg)
{
    if (rank != 0)
        return;
    out_begin("progress");
    out_str("msg", msg);
    out_end();
}
