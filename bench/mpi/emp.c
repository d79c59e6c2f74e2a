/* tigon_bench_mpi: EMP's loop (seed 003, Table 2, Fig. 6) (see main.c). */
#include "bench.h"

#define EMP_SIZE 10000
#define EMP_BATCH 5

/* Both ranks: post 5 Irecvs, 5 Isends of 10 kB, compute, Waitall. Rank 0 times each call:
 * samples = Isend calls, samples2 = Irecv calls, and Waitall times go after the Isends. */
static double m_emp(long units, long n, double *compute_ns, long *waitall)
{
    int peer = 1 - rank;
    MPI_Request req[2 * EMP_BATCH];
    double comp = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        for (int j = 0; j < EMP_BATCH; j++) {
            double a = now_ns();
            MPI_Irecv(rbuf + (size_t)j * EMP_SIZE, EMP_SIZE, MPI_BYTE, peer, TAG_DATA,
                      MPI_COMM_WORLD, &req[j]);
            samples2[i * EMP_BATCH + j] = (long)(now_ns() - a);
        }
        for (int j = 0; j < EMP_BATCH; j++) {
            double a = now_ns();
            MPI_Isend(sbuf + (size_t)j * EMP_SIZE, EMP_SIZE, MPI_BYTE, peer, TAG_DATA,
                      MPI_COMM_WORLD, &req[EMP_BATCH + j]);
            samples[i * EMP_BATCH + j] = (long)(now_ns() - a);
        }
        double c = now_ns();
        work(units);
        double w = now_ns();
        comp += w - c;
        MPI_Waitall(2 * EMP_BATCH, req, MPI_STATUSES_IGNORE);
        waitall[i] = (long)(now_ns() - w);
    }
    double t = now_ns() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    *compute_ns = comp;
    return t;
}

static double w_emp(const void *c, long n)
{
    const struct mctx *x = c;
    return m_emp(x->a, n, x->out, x->arr);
}

void emp(void)
{
    static const double us_full[] = {0, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};
    static const double us_quick[] = {0, 20, 100, 500, 2000};
    const double *us = quick ? us_quick : us_full;
    int nl = quick ? 5 : 10;
    long cap = nmax_samples / EMP_BATCH;
    long *waitall = malloc(sizeof(long) * (size_t)cap);
    for (int li = 0; li < nl; li++) {
        long units = units_for_ns(us[li] * 1000);
        double comp;
        char msg[96];
        snprintf(msg, sizeof msg, "EMP loop, compute %.0f us per batch", us[li]);
        progress(msg);
        struct mctx c = {.a = units, .arr = waitall, .out = &comp};
        long n = calibrated_n(w_emp, &c, 5, cap);
        double t = m_emp(units, n, &comp, waitall);
        if (rank == 0) {
            out_begin("emp");
            out_long("msg_size", EMP_SIZE);
            out_long("batch", EMP_BATCH);
            out_num("compute_us", us[li]);
            out_long("n", n);
            out_num("total_ns", t);
            out_num("compute_ns", comp);
            out_num("bytes", 2.0 * EMP_BATCH * EMP_SIZE * n);
            out_arr("isend_ns", samples, n * EMP_BATCH);
            out_arr("irecv_ns", samples2, n * EMP_BATCH);
            out_arr("waitall_ns", waitall, n);
            out_end();
        }
    }
    free(waitall);
}
