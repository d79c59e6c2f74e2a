/* tigon_bench_mpi: LogP (seed 002, Fig. 3) (see main.c). */
#include "bench.h"

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

static double w_rtt(const void *c, long n) { return m_rtt(((const struct mctx *)c)->size, n); }
static double w_gap(const void *c, long n)
{
    double acked;
    m_send(((const struct mctx *)c)->size, n, 0, &acked);
    return acked;
}

void logp(int size)
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
