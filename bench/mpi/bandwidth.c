/* tigon_bench_mpi: bandwidth (seed 002, Fig. 9) (see main.c). */
#include "bench.h"

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

void bandwidth(int size)
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
