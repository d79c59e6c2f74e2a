/* tigon_bench_mpi: double buffering (seed 000, Fig. 7) (see main.c). */
#include "bench.h"
#include <sched.h>

/* Producer fill and consumer sum: real work on the data plus a delay loop of `upk` units
 * per KiB, which sets the rate (seed 000, section 5.2). */
static void fill(double *a, long n, long upk, long it)
{
    for (long i = 0; i < n; i++)
        a[i] = (double)(i + it);
    work(upk * n * 8 / 1024);
}
static double sum_acc;
static void consume(const double *a, long n, long upk)
{
    double s = 0;
    for (long i = 0; i < n; i++)
        s += a[i];
    sum_acc += s;
    work(upk * n * 8 / 1024);
}

/* Bytes/s of fill or consume alone on this rank (no communication). */
static double standalone_rate(int producer, long upk)
{
    long n = (64 << 10) / 8;
    double *a = (double *)sbuf, best = 1e18;
    for (int k = 0; k < 20; k++) {
        double t = now_ns();
        if (producer)
            fill(a, n, upk, k);
        else
            consume(a, n, upk);
        t = now_ns() - t;
        if (t < best)
            best = t;
    }
    return (double)n * 8 / best * 1e9;
}

/* Units per KiB giving `rate` bytes/s, the data work's own cost taken off; refined from
 * measured rates, since a unit's cost here need not be the one calibrated at start. */
static long upk_for_rate(int producer, double rate)
{
    double base = 1024e9 / standalone_rate(producer, 0); /* ns per KiB of the data work */
    double want = 1024e9 / rate;
    double extra = want > base ? want - base : 0;
    long upk = (long)(extra / ns_per_unit + 0.5);
    for (int k = 0; k < 3 && upk > 0; k++) {
        double unit = (1024e9 / standalone_rate(producer, upk) - base) / (double)upk;
        if (unit <= 0)
            break;
        upk = (long)(extra / unit + 0.5);
    }
    return upk;
}

/* One run of seed 000's Fig. 7 with n rounds of two buffers; returns the consumer's time
 * from the start to the last buffer summed (broadcast to rank 0). */
static double m_dbuf(long bsize, long n, long upk_p, long upk_c)
{
    long nd = bsize / 8;
    double *A = (double *)sbuf, *B = (double *)(sbuf + bsize);
    MPI_Request ra, rb, ca, cb;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns(), t = 0;
    if (rank == 0) {
        fill(A, nd, upk_p, 0);
        MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_CTS_A, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Isend(A, (int)bsize, MPI_BYTE, 1, TAG_BUF_A, MPI_COMM_WORLD, &ra);
        fill(B, nd, upk_p, 0);
        MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_CTS_B, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Isend(B, (int)bsize, MPI_BYTE, 1, TAG_BUF_B, MPI_COMM_WORLD, &rb);
        for (long i = 0; i < n - 1; i++) {
            MPI_Wait(&ra, MPI_STATUS_IGNORE);
            fill(A, nd, upk_p, i + 1);
            MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_CTS_A, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Isend(A, (int)bsize, MPI_BYTE, 1, TAG_BUF_A, MPI_COMM_WORLD, &ra);
            MPI_Wait(&rb, MPI_STATUS_IGNORE);
            fill(B, nd, upk_p, i + 1);
            MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_CTS_B, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Isend(B, (int)bsize, MPI_BYTE, 1, TAG_BUF_B, MPI_COMM_WORLD, &rb);
        }
        MPI_Wait(&ra, MPI_STATUS_IGNORE);
        MPI_Wait(&rb, MPI_STATUS_IGNORE);
        MPI_Recv(&t, 1, MPI_DOUBLE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        double *a = (double *)rbuf, *b = (double *)(rbuf + bsize);
        MPI_Irecv(a, (int)bsize, MPI_BYTE, 0, TAG_BUF_A, MPI_COMM_WORLD, &ra);
        MPI_Isend(NULL, 0, MPI_BYTE, 0, TAG_CTS_A, MPI_COMM_WORLD, &ca);
        MPI_Irecv(b, (int)bsize, MPI_BYTE, 0, TAG_BUF_B, MPI_COMM_WORLD, &rb);
        MPI_Isend(NULL, 0, MPI_BYTE, 0, TAG_CTS_B, MPI_COMM_WORLD, &cb);
        for (long i = 0; i < n; i++) {
            int last = i == n - 1;
            MPI_Wait(&ra, MPI_STATUS_IGNORE);
            consume(a, nd, upk_c);
            MPI_Wait(&ca, MPI_STATUS_IGNORE);
            if (!last) {
                MPI_Irecv(a, (int)bsize, MPI_BYTE, 0, TAG_BUF_A, MPI_COMM_WORLD, &ra);
                MPI_Isend(NULL, 0, MPI_BYTE, 0, TAG_CTS_A, MPI_COMM_WORLD, &ca);
            }
            MPI_Wait(&rb, MPI_STATUS_IGNORE);
            consume(b, nd, upk_c);
            MPI_Wait(&cb, MPI_STATUS_IGNORE);
            if (!last) {
                MPI_Irecv(b, (int)bsize, MPI_BYTE, 0, TAG_BUF_B, MPI_COMM_WORLD, &rb);
                MPI_Isend(NULL, 0, MPI_BYTE, 0, TAG_CTS_B, MPI_COMM_WORLD, &cb);
            }
        }
        t = now_ns() - t0;
        MPI_Send(&t, 1, MPI_DOUBLE, 0, TAG_ACK, MPI_COMM_WORLD);
    }
    return t;
}

static double w_dbuf(const void *c, long n)
{
    const struct mctx *x = c;
    return m_dbuf(x->size, n + 1, x->a, x->b);
}

/* Whether both ranks may run on one CPU only, the same one (then the producer's and the
   consumer's work take turns on it, and the rate is bounded by 1 / (1/p + 1/c), not by
   min(p, c)). Rank 0's answer; the other rank sends its CPU set. */
static int ranks_share_one_cpu(void)
{
    cpu_set_t mine, theirs;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0)
        return 0;
    if (rank == 1) {
        MPI_Send(&mine, (int)sizeof mine, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD);
        return 0;
    }
    MPI_Recv(&theirs, (int)sizeof theirs, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    return CPU_COUNT(&mine) == 1 && CPU_EQUAL(&mine, &theirs);
}

void double_buffering(void)
{
    int shared = ranks_share_one_cpu();
    /* The seed's two regimes: the slow side at `slow` B/s, the other three times faster. */
    const double slow = 200e6, fast = 600e6;
    static const long bsizes_full[] = {1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10,
                                       64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20};
    static const long bsizes_quick[] = {1 << 10, 8 << 10, 64 << 10, 512 << 10};
    const long *bs = quick ? bsizes_quick : bsizes_full;
    int nb = quick ? 4 : 11;
    for (int regime = 0; regime < 2; regime++) {
        const char *name = regime == 0 ? "producer" : "consumer";
        double want_p = regime == 0 ? slow : fast, want_c = regime == 0 ? fast : slow;
        /* Each rank calibrates its own role alone while the other waits. */
        long upk_p = 0, upk_c = 0;
        double rate_p = 0, rate_c = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            upk_p = upk_for_rate(1, want_p);
            rate_p = standalone_rate(1, upk_p);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
            upk_c = upk_for_rate(0, want_c);
            rate_c = standalone_rate(0, upk_c);
            MPI_Send(&rate_c, 1, MPI_DOUBLE, 0, TAG_ACK, MPI_COMM_WORLD);
        } else {
            MPI_Recv(&rate_c, 1, MPI_DOUBLE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        for (int bi = 0; bi < nb; bi++) {
            long b = bs[bi];
            char msg[96];
            snprintf(msg, sizeof msg, "double buffering (%s-bound), buffer %ld B", name, b);
            progress(msg);
            struct mctx c = {.size = (int)b, .a = upk_p, .b = upk_c};
            long n = calibrated_n(w_dbuf, &c, 3, 1000000) + 1;
            double t = m_dbuf(b, n, upk_p, upk_c);
            if (rank == 0) {
                out_begin("dbuf");
                out_str("regime", name);
                out_long("bsize", b);
                out_long("n", n);
                out_num("bytes", 2.0 * n * b);
                out_num("total_ns", t);
                out_num("producer_Bps", rate_p);
                out_num("consumer_Bps", rate_c);
                out_long("one_cpu", shared);
                out_end();
            }
        }
    }
}
