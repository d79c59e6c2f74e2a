/*
 * tigon_bench_mpi: the seeds' MPI measurements in one program, for two ranks.
 *
 *   LogP (seed 002, Fig. 3)      RTT/2, g, o_s, o_r (L is computed by the driver)
 *   bandwidth (seed 002, Fig. 9) unidirectional, simultaneous bidirectional (ping-pong
 *                                bandwidth is size / (RTT/2), from the same loop as RTT/2)
 *   availability (seed 001, Fig. 9) polling factor sweep for 32 KiB and 1 MiB
 *   double buffering (seed 000, Fig. 7) producer/consumer with CTS, delay-loop rates
 *   EMP's loop (seed 003, Table 2, Fig. 6) Irecv x5, Isend x5, compute, Waitall
 *
 * Rank 0 does all timing and prints one JSON object per line on stdout; `tigon bench mpi`
 * parses them, builds histograms and prints the tables. Rank 0 decides iteration counts from
 * a short pilot run and broadcasts them, so a slow transport gets fewer iterations instead
 * of a longer run.
 *
 * usage: tigon_bench_mpi [--quick] [--sizes N,N,...] [--tests logp,bw,avail,dbuf,emp]
 *                        [--budget-ms MS]
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_DATA = 1, TAG_ACK, TAG_STOP, TAG_CTS_A, TAG_CTS_B, TAG_BUF_A, TAG_BUF_B };

static int rank;
static int quick;
static double budget_ns;  /* wall time one measurement should take */
static long nmax_samples; /* cap on iterations of per-iteration-sampled loops */
static double ns_per_unit; /* cost of one unit of work(), calibrated at start */
static char *sbuf, *rbuf;
static size_t buf_cap;
static long *samples, *samples2;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Seed 002's Spin(D): busy-wait D ns of wall time. */
static void spin_ns(double d)
{
    double end = now_ns() + d;
    while (now_ns() < end)
        ;
}

/* CPU work in units (a dependent floating-point chain the compiler cannot drop): the
 * "compute" of the availability, double-buffering and EMP loops. Unlike spin_ns, time the
 * CPU is taken away (e.g. by an agent on the same core) makes it last longer. */
static volatile double sink = 1.0;
static void work(long units)
{
    double x = sink;
    for (long i = 0; i < units; i++)
        x = x * 0.9999999 + 1e-7;
    sink = x;
}

/* The fastest of many short runs: on a shared machine a long run is rarely left alone. */
static void calibrate(void)
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

static long units_for_ns(double ns) { return (long)(ns / ns_per_unit + 0.5); }

/* Rank 0's decision, shared with rank 1. */
static long agree(long v)
{
    MPI_Bcast(&v, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return v;
}
static double agree_d(double v)
{
    MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return v;
}

/* Iterations that fill the budget, given the pilot's time per iteration. */
static long plan(double per_iter_ns, long nmin, long nmax)
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

/* A measurement run with n iterations; returns rank 0's wall time for it. */
typedef double (*meas_fn)(const void *ctx, long n);

/* Grows n (x4, from 1) until a run takes an eighth of the budget (these runs also warm up
 * connections and caches), then returns the n that fills the budget, agreed by both
 * ranks. A slow transport gets fewer iterations, not a longer run. */
static long calibrated_n(meas_fn f, const void *ctx, long nmin, long nmax)
{
    for (long n = 1;; n *= 4) {
        double t = f(ctx, n);
        long more = agree(rank == 0 && t < budget_ns / 8 && n * 4 <= nmax);
        if (!more)
            return plan(t / (double)n, nmin, nmax);
    }
}

static void out_begin(const char *type) { printf("{\"t\":\"%s\"", type); }
static void out_long(const char *k, long v) { printf(",\"%s\":%ld", k, v); }
static void out_num(const char *k, double v) { printf(",\"%s\":%.1f", k, v); }
static void out_str(const char *k, const char *v) { printf(",\"%s\":\"%s\"", k, v); }
static void out_arr(const char *k, const long *a, long n)
{
    printf(",\"%s\":[", k);
    for (long i = 0; i < n; i++)
        printf(i ? ",%ld" : "%ld", a[i]);
    printf("]");
}
static void out_end(void)
{
    printf("}\n");
    fflush(stdout);
}
static void progress(const char *msg)
{
    if (rank != 0)
        return;
    out_begin("progress");
    out_str("msg", msg);
    out_end();
}

/* ---- LogP (seed 002, Fig. 3) ---------------------------------------------------------- */

/* (a) ping-pong: per-iteration RTT/2 into samples. */
static double m_rtt(int size, long n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        if (rank == 0) {
            double a = now_ns();
            MPI_Send(sbuf, size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD);
            MPI_Recv(rbuf, size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            samples[i] = (long)((now_ns() - a) / 2);
        } else {
            MPI_Recv(rbuf, size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD);
        }
    }
    return now_ns() - t0;
}

/* (b) rank 0 sends a stream, Spin(D) between sends; rank 1 receives. Each send is
 * Isend ... Spin(D) ... Wait, the asynchronous send the seed prefers: host time is the time
 * in the two calls (samples), and transfer progress during the spin is overlap, not
 * overhead. Returns the time to the last Wait; *acked = time until rank 1 confirmed it
 * received everything (the delivered rate, used for g). */
static double m_send(int size, long n, double d, double *acked)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns(), t1 = 0;
    if (rank == 0) {
        for (long i = 0; i < n; i++) {
            MPI_Request r;
            double a = now_ns();
            MPI_Isend(sbuf, size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &r);
            double b = now_ns();
            if (d > 0)
                spin_ns(d);
            double c = now_ns();
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            double e = now_ns();
            samples[i] = (long)((b - a) + (e - c));
        }
        t1 = now_ns();
        MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        for (long i = 0; i < n; i++)
            MPI_Recv(rbuf, size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD);
    }
    *acked = now_ns() - t0;
    return t1 - t0;
}

/* (c) rank 1 sends a stream with blocking sends; rank 0 receives with Irecv ... Spin(D) ...
 * Wait, so with D past the sender's gap the message has arrived (or, for a rendezvous
 * message, could have been moved during the spin) when rank 0 asks for it. */
static double m_recv(int size, long n, double d)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns();
    if (rank == 0) {
        for (long i = 0; i < n; i++) {
            MPI_Request r;
            double a = now_ns();
            MPI_Irecv(rbuf, size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &r);
            double b = now_ns();
            if (d > 0)
                spin_ns(d);
            double c = now_ns();
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            double e = now_ns();
            samples[i] = (long)((b - a) + (e - c));
        }
    } else {
        for (long i = 0; i < n; i++)
            MPI_Send(sbuf, size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD);
    }
    return now_ns() - t0;
}

/* Arguments of a measurement, for calibrated_n. */
struct mctx {
    int size;
    double d;
    long a, b;
    long *arr;
    double *out;
};

static double w_rtt(const void *c, long n) { return m_rtt(((const struct mctx *)c)->size, n); }
static double w_gap(const void *c, long n)
{
    double acked;
    m_send(((const struct mctx *)c)->size, n, 0, &acked);
    return acked;
}

static void logp(int size)
{
    struct mctx c = {.size = size};
    double acked, t;
    char msg[64];
    snprintf(msg, sizeof msg, "LogP %d B", size);
    progress(msg);
    /* RTT/2 */
    long n = calibrated_n(w_rtt, &c, 5, nmax_samples);
    t = m_rtt(size, n);
    if (rank == 0) {
        out_begin("rtt");
        out_long("size", size);
        out_long("n", n);
        out_num("total_ns", t);
        out_arr("half_rtt_ns", samples, n);
        out_end();
    }
    /* g = g(0): a stream with no spin, until the receiver has it all */
    n = calibrated_n(w_gap, &c, 5, nmax_samples * 4);
    m_send(size, n, 0, &acked);
    double g0 = agree_d(acked / (double)n);
    if (rank == 0) {
        out_begin("gap");
        out_long("size", size);
        out_long("n", n);
        out_num("total_ns", acked);
        out_end();
    }
    /* o_s and o_r from g(D) = o + max(Idle, D) with D past Idle (Idle < g(0)): the seed
     * averages g(D) - D over a few such D. */
    double d0 = g0 * 1.5 > 5000 ? g0 * 1.5 : 5000;
    int nd = quick ? 1 : 2;
    for (int k = 0; k < nd; k++) {
        double d = d0 * (k + 1);
        long n2 = plan(g0 + d, 5, nmax_samples);
        t = m_send(size, n2, d, &acked);
        if (rank == 0) {
            out_begin("send_ovh");
            out_long("size", size);
            out_long("n", n2);
            out_num("d_ns", d);
            out_num("total_ns", t);
            out_arr("call_ns", samples, n2);
            out_end();
        }
        t = m_recv(size, n2, d);
        if (rank == 0) {
            out_begin("recv_ovh");
            out_long("size", size);
            out_long("n", n2);
            out_num("d_ns", d);
            out_num("total_ns", t);
            out_arr("call_ns", samples, n2);
            out_end();
        }
    }
}

/* ---- bandwidth (seed 002, Fig. 9) ------------------------------------------------------- */

/* Messages in flight per window: 16, fewer for large messages so that receives land in
 * distinct parts of a 16 MiB buffer. */
static int window_for(int size)
{
    long w = size > 0 ? (long)(buf_cap / (size_t)size) : 16;
    return w >= 16 ? 16 : (w < 1 ? 1 : (int)w);
}

/* Unidirectional: rank 0 sends windows of Isends, rank 1 receives; rank 1 acks the end. */
static double m_uni(int size, long windows)
{
    int w = window_for(size);
    MPI_Request req[16];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns();
    for (long k = 0; k < windows; k++) {
        for (int j = 0; j < w; j++) {
            if (rank == 0)
                MPI_Isend(sbuf, size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &req[j]);
            else
                MPI_Irecv(rbuf + (size_t)j * size, size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD,
                          &req[j]);
        }
        MPI_Waitall(w, req, MPI_STATUSES_IGNORE);
    }
    if (rank == 0)
        MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
        MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD);
    return now_ns() - t0;
}

/* Simultaneous bidirectional: both ranks post a window of Irecvs and Isends, Waitall. */
static double m_bidir(int size, long windows)
{
    int w = window_for(size);
    int peer = 1 - rank;
    MPI_Request req[32];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns();
    for (long k = 0; k < windows; k++) {
        for (int j = 0; j < w; j++)
            MPI_Irecv(rbuf + (size_t)j * size, size, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD,
                      &req[j]);
        for (int j = 0; j < w; j++)
            MPI_Isend(sbuf, size, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD, &req[w + j]);
        MPI_Waitall(2 * w, req, MPI_STATUSES_IGNORE);
    }
    /* both directions done on both ranks */
    MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, TAG_ACK, NULL, 0, MPI_BYTE, peer, TAG_ACK,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return now_ns() - t0;
}

static double w_uni(const void *c, long n) { return m_uni(((const struct mctx *)c)->size, n); }
static double w_bidir(const void *c, long n)
{
    return m_bidir(((const struct mctx *)c)->size, n);
}

static void bandwidth(int size)
{
    int w = window_for(size);
    struct mctx c = {.size = size};
    char msg[64];
    snprintf(msg, sizeof msg, "bandwidth %d B", size);
    progress(msg);
    long n = calibrated_n(w_uni, &c, 1, 100000);
    double t = m_uni(size, n);
    if (rank == 0) {
        out_begin("bw");
        out_str("kind", "uni");
        out_long("size", size);
        out_long("n", n * w);
        out_num("bytes", (double)n * w * size);
        out_num("total_ns", t);
        out_end();
    }
    n = calibrated_n(w_bidir, &c, 1, 100000);
    t = m_bidir(size, n);
    if (rank == 0) {
        out_begin("bw");
        out_str("kind", "bidir");
        out_long("size", size);
        out_long("n", n * w);
        out_num("bytes", 2.0 * n * w * size);
        out_num("total_ns", t);
        out_end();
    }
}

/* ---- processor availability (seed 001, Fig. 9) ------------------------------------------ */

/* Rank 0 (ping): each round posts an Isend and an Irecv, then works in chunks of `poll`
 * units with an MPI_Test after each chunk until the reply has come, until `total` units of
 * work are done; rank 1 (pong) replies to every message (comm). The quiet run does the same
 * work in the same chunks with no MPI call at all, as seed 001's dry run: what a transport
 * charges the caller inside MPI_Test counts against its availability, not in its baseline.
 * availability = quiet / comm. */
static double m_avail(int size, long poll, long total, int comm, double limit_ns, long *rounds,
                      long *used)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ns(), t = 0;
    long n = 0;
    if (!comm) {
        if (rank == 0) {
            for (long left = total; left > 0;) {
                long c = poll < left ? poll : left;
                work(c);
                left -= c;
            }
            t = now_ns() - t0;
            *used = total;
        }
        *rounds = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        return t;
    }
    if (rank == 0) {
        long left = total;
        MPI_Request s, r;
        int done = 0, over = 0;
        while (left > 0 && !over) {
            MPI_Isend(sbuf, size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &s);
            MPI_Irecv(rbuf, size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &r);
            done = 0;
            do {
                long c = poll < left ? poll : left;
                work(c);
                left -= c;
                MPI_Test(&r, &done, MPI_STATUS_IGNORE);
                over = limit_ns > 0 && now_ns() - t0 > limit_ns;
            } while (!done && left > 0 && !over);
            if (done) {
                n++;
                MPI_Wait(&s, MPI_STATUS_IGNORE);
            }
        }
        t = now_ns() - t0;
        *used = total - left;
        MPI_Send(NULL, 0, MPI_BYTE, 1, TAG_STOP, MPI_COMM_WORLD);
        if (!done)
            MPI_Wait(&r, MPI_STATUS_IGNORE); /* pong answers the ping in flight */
        MPI_Wait(&s, MPI_STATUS_IGNORE);
    } else {
        for (;;) {
            MPI_Status st;
            MPI_Recv(rbuf, size, MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            if (st.MPI_TAG == TAG_STOP)
                break;
            MPI_Send(sbuf, size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD);
        }
    }
    *rounds = n;
    return t;
}

static void availability(void)
{
    static const int sizes[] = {32 << 10, 1 << 20};
    static const long polls_full[] = {10, 100, 1000, 10000, 100000, 1000000, 10000000};
    static const long polls_quick[] = {100, 1000, 10000, 100000, 1000000};
    const long *polls = quick ? polls_quick : polls_full;
    int np = quick ? 5 : 7;
    long work_units = units_for_ns(quick ? 100e6 : 500e6);
    long max_polls = quick ? 50000 : 200000;
    /* A transport whose MPI_Test is slow would stretch a point without bound: the comm run
     * stops at this wall time and the quiet run then does the work the comm run did. */
    double limit = quick ? 1e9 : 4e9;
    for (int si = 0; si < 2; si++) {
        for (int pi = 0; pi < np; pi++) {
            long rounds, p = polls[pi];
            /* The same work in both runs of a point; at small polling factors less of it, so
             * that the run is not millions of MPI_Test calls (availability is a ratio). */
            long total = p * max_polls < work_units ? p * max_polls : work_units;
            char msg[96];
            snprintf(msg, sizeof msg, "availability %d B, polling factor %ld", sizes[si], p);
            progress(msg);
            long used = 0, quiet_rounds, truncated;
            double tc = m_avail(sizes[si], p, total, 1, limit, &rounds, &used);
            truncated = agree(used < total);
            used = agree(used);
            double tq = m_avail(sizes[si], p, used, 0, 0, &quiet_rounds, &used);
            if (rank == 0) {
                out_begin("avail");
                out_long("size", sizes[si]);
                out_long("poll", p);
                out_long("work_units", used);
                out_long("truncated", truncated);
                out_num("quiet_ns", tq);
                out_num("comm_ns", tc);
                out_long("rounds", rounds);
                out_end();
            }
        }
    }
}

/* ---- double buffering (seed 000, Fig. 7) ----------------------------------------------- */

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

static void double_buffering(void)
{
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
                out_end();
            }
        }
    }
}

/* ---- EMP's loop (seed 003, Table 2, Fig. 6) ---------------------------------------------- */

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

static void emp(void)
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

/* ---- main ---------------------------------------------------------------------------------- */

static int has_test(const char *tests, const char *name)
{
    if (!tests)
        return 1;
    size_t k = strlen(name);
    for (const char *p = tests; (p = strstr(p, name)); p += k)
        if ((p == tests || p[-1] == ',') && (p[k] == 0 || p[k] == ','))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int np;
    const char *tests = NULL, *sizes_arg = NULL;
    double budget_ms = -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--tests") && i + 1 < argc)
            tests = argv[++i];
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            sizes_arg = argv[++i];
        else if (!strcmp(argv[i], "--budget-ms") && i + 1 < argc)
            budget_ms = atof(argv[++i]);
        else {
            if (rank == 0)
                printf("{\"t\":\"error\",\"msg\":\"unknown argument %s\"}\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (np != 2) {
        if (rank == 0)
            printf("{\"t\":\"error\",\"msg\":\"needs exactly 2 ranks, got %d\"}\n", np);
        MPI_Finalize();
        return 2;
    }
    budget_ns = (budget_ms > 0 ? budget_ms : (quick ? 40 : 250)) * 1e6;
    nmax_samples = quick ? 5000 : 20000;

    int sizes[64], ns = 0;
    if (sizes_arg) {
        for (const char *p = sizes_arg; *p && ns < 64;) {
            sizes[ns++] = atoi(p);
            const char *c = strchr(p, ',');
            if (!c)
                break;
            p = c + 1;
        }
    } else if (quick) {
        static const int q[] = {0, 64, 1024, 16384, 65536, 1 << 20, 4 << 20};
        for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
            sizes[ns++] = q[i];
    } else {
        sizes[ns++] = 0;
        for (int s = 1; s <= (4 << 20); s *= 4)
            sizes[ns++] = s;
    }
    int maxsize = 0;
    for (int i = 0; i < ns; i++)
        if (sizes[i] > maxsize)
            maxsize = sizes[i];
    buf_cap = (size_t)16 << 20;
    if ((size_t)maxsize > buf_cap)
        buf_cap = (size_t)maxsize;
    sbuf = malloc(buf_cap);
    rbuf = malloc(buf_cap);
    samples = malloc(sizeof(long) * (size_t)nmax_samples * 4 + 64);
    samples2 = malloc(sizeof(long) * (size_t)nmax_samples + 64);
    if (!sbuf || !rbuf || !samples || !samples2)
        MPI_Abort(MPI_COMM_WORLD, 3);
    memset(sbuf, 1, buf_cap);
    memset(rbuf, 0, buf_cap);
    calibrate();
    ns_per_unit = agree_d(ns_per_unit);

    if (rank == 0) {
        char host[256] = "";
        MPI_Get_processor_name(host, &(int){0});
        out_begin("hello");
        out_long("np", np);
        out_long("quick", quick);
        out_num("budget_ns", budget_ns);
        printf(",\"ns_per_unit\":%.4f", ns_per_unit);
        out_str("host", host);
        out_end();
    }
    if (has_test(tests, "logp"))
        for (int i = 0; i < ns; i++)
            logp(sizes[i]);
    if (has_test(tests, "bw"))
        for (int i = 0; i < ns; i++)
            bandwidth(sizes[i]);
    if (has_test(tests, "avail"))
        availability();
    if (has_test(tests, "dbuf"))
        double_buffering();
    if (has_test(tests, "emp"))
        emp();
    if (rank == 0) {
        out_begin("done");
        out_end();
    }
    MPI_Finalize();
    return 0;
}
