/* tigon_bench_mpi: processor availability (seed 001, Fig. 9) (see main.c). */
#include "bench.h"

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

void availability(void)
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
