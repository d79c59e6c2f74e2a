/* Contiguous data that does not start at the buffer argument: MPI_BOTTOM with a type at
   absolute addresses, and types whose lower bound is not 0, through every send flavour
   (standard, synchronous, buffered, ready; blocking, nonblocking and persistent) and every
   receive flavour, eager and rendezvous sizes, in a ring; then MPI_Alltoallw over MPI_BOTTOM
   (its persistent requests are how mpi4py's testAlltoallwBottom found that Open MPI 4.1.4
   hands an MTL the buffer argument, not the data, for a persistent contiguous send). */
#include "common.h"

enum { SEND, ISEND, SSEND, ISSEND, BSEND, RSEND, SEND_INIT, SSEND_INIT, BSEND_INIT, FLAVOURS };
static const char *flavour_name[] = {"Send",   "Isend",     "Ssend",      "Issend",    "Bsend",
                                     "Rsend",  "Send_init", "Ssend_init", "Bsend_init"};
enum { RECV_IRECV, RECV_INIT, RECV_FLAVOURS };

/* Where the data lies relative to the buffer argument. */
enum { BOTTOM, LB_POSITIVE, LB_NEGATIVE, PLACEMENTS };
static const char *placement_name[] = {"MPI_BOTTOM", "lb +24", "lb -40"};

/* A type of one block of `n` bytes at displacement `disp`. */
static MPI_Datatype block(int n, MPI_Aint disp)
{
    MPI_Datatype t;
    MPI_Datatype byte = MPI_BYTE;
    MPI_OK(MPI_Type_create_struct(1, &n, &disp, &byte, &t));
    MPI_OK(MPI_Type_commit(&t));
    return t;
}

/* The buffer argument and type that put `n` bytes at `data`. */
static void *placed(int how, unsigned char *data, int n, MPI_Datatype *t)
{
    MPI_Aint addr;
    MPI_OK(MPI_Get_address(data, &addr));
    switch (how) {
    case BOTTOM:
        *t = block(n, addr);
        return MPI_BOTTOM;
    case LB_POSITIVE:
        *t = block(n, 24);
        return data - 24;
    default:
        *t = block(n, -40);
        return data + 40;
    }
}

static void ring(int rank, int size, int n, int how, int sf, int rf, uint32_t seed)
{
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    unsigned char *sdata = (unsigned char *) xmalloc((size_t) n + 128) + 64;
    unsigned char *rdata = (unsigned char *) xmalloc((size_t) n + 128) + 64;
    fill(sdata, (size_t) n, seed + (uint32_t) rank);
    memset(rdata - 64, 0xee, (size_t) n + 128);
    MPI_Datatype st, rt;
    void *sbuf = placed(how, sdata, n, &st), *rbuf = placed(how, rdata, n, &rt);
    MPI_Request rreq, sreq = MPI_REQUEST_NULL;
    if (rf == RECV_INIT) {
        MPI_OK(MPI_Recv_init(rbuf, 1, rt, from, 5, MPI_COMM_WORLD, &rreq));
        MPI_OK(MPI_Start(&rreq));
    } else {
        MPI_OK(MPI_Irecv(rbuf, 1, rt, from, 5, MPI_COMM_WORLD, &rreq));
    }
    /* Every receive is posted before any ready send starts. */
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    switch (sf) {
    case SEND: MPI_OK(MPI_Send(sbuf, 1, st, to, 5, MPI_COMM_WORLD)); break;
    case ISEND: MPI_OK(MPI_Isend(sbuf, 1, st, to, 5, MPI_COMM_WORLD, &sreq)); break;
    case SSEND: MPI_OK(MPI_Ssend(sbuf, 1, st, to, 5, MPI_COMM_WORLD)); break;
    case ISSEND: MPI_OK(MPI_Issend(sbuf, 1, st, to, 5, MPI_COMM_WORLD, &sreq)); break;
    case BSEND: MPI_OK(MPI_Bsend(sbuf, 1, st, to, 5, MPI_COMM_WORLD)); break;
    case RSEND: MPI_OK(MPI_Rsend(sbuf, 1, st, to, 5, MPI_COMM_WORLD)); break;
    case SEND_INIT: MPI_OK(MPI_Send_init(sbuf, 1, st, to, 5, MPI_COMM_WORLD, &sreq)); break;
    case SSEND_INIT: MPI_OK(MPI_Ssend_init(sbuf, 1, st, to, 5, MPI_COMM_WORLD, &sreq)); break;
    default: MPI_OK(MPI_Bsend_init(sbuf, 1, st, to, 5, MPI_COMM_WORLD, &sreq)); break;
    }
    if (sf >= SEND_INIT) MPI_OK(MPI_Start(&sreq));
    MPI_Status s;
    MPI_OK(MPI_Wait(&rreq, &s));
    MPI_OK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
    if (rf == RECV_INIT) MPI_OK(MPI_Request_free(&rreq));
    if (sf >= SEND_INIT) MPI_OK(MPI_Request_free(&sreq));
    int got;
    MPI_OK(MPI_Get_count(&s, MPI_BYTE, &got));
    const char *what = flavour_name[sf];
    CHECK(got == n, "%s, %s, %d B, %s: received %d bytes", what, placement_name[how], n,
          rf == RECV_INIT ? "Recv_init" : "Irecv", got);
    long bad = verify(rdata, (size_t) n, seed + (uint32_t) from);
    CHECK(bad < 0, "%s, %s, %d B, %s: byte %ld wrong", what, placement_name[how], n,
          rf == RECV_INIT ? "Recv_init" : "Irecv", bad);
    for (int i = 1; i <= 64; i++)
        CHECK(rdata[-i] == 0xee && rdata[n - 1 + i] == 0xee, "%s, %s, %d B: written outside the data",
              what, placement_name[how], n);
    MPI_OK(MPI_Type_free(&st));
    MPI_OK(MPI_Type_free(&rt));
    free(sdata - 64);
    free(rdata - 64);
}

/* mpi4py's testAlltoallwBottom: block i of each rank's buffer to rank i, every type at
   absolute addresses, both buffers MPI_BOTTOM. */
static void alltoallw_bottom(int rank, int size, int n)
{
    int *sbuf = xmalloc(sizeof(int) * (size_t) size * (size_t) n);
    int *rbuf = xmalloc(sizeof(int) * (size_t) size * (size_t) n);
    for (int i = 0; i < size * n; i++) {
        sbuf[i] = rank * 1000 + i / n;
        rbuf[i] = -1;
    }
    MPI_Datatype *st = xmalloc(sizeof(MPI_Datatype) * (size_t) size);
    MPI_Datatype *rt = xmalloc(sizeof(MPI_Datatype) * (size_t) size);
    int *counts = xmalloc(sizeof(int) * (size_t) size), *displs = xmalloc(sizeof(int) * (size_t) size);
    for (int i = 0; i < size; i++) {
        MPI_Aint sa, ra;
        MPI_OK(MPI_Get_address(sbuf + i * n, &sa));
        MPI_OK(MPI_Get_address(rbuf + i * n, &ra));
        st[i] = block(n * (int) sizeof(int), sa);
        rt[i] = block(n * (int) sizeof(int), ra);
        counts[i] = 1;
        displs[i] = 0;
    }
    MPI_OK(MPI_Alltoallw(MPI_BOTTOM, counts, displs, st, MPI_BOTTOM, counts, displs, rt,
                         MPI_COMM_WORLD));
    for (int i = 0; i < size * n; i++)
        CHECK(rbuf[i] == (i / n) * 1000 + rank, "Alltoallw over MPI_BOTTOM, %d ints a block: "
              "element %d is %d, want %d", n, i, rbuf[i], (i / n) * 1000 + rank);
    for (int i = 0; i < size; i++) {
        MPI_OK(MPI_Type_free(&st[i]));
        MPI_OK(MPI_Type_free(&rt[i]));
    }
    free(st);
    free(rt);
    free(counts);
    free(displs);
    free(sbuf);
    free(rbuf);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    /* Room for the buffered sends, one message at a time. */
    int bsize = (1 << 20) + MPI_BSEND_OVERHEAD + 1024;
    void *bbuf = xmalloc((size_t) bsize);
    MPI_OK(MPI_Buffer_attach(bbuf, bsize));
    /* Eager, a few frames, and rendezvous (beyond the channel's largest eager message). */
    int sizes[] = {8, 3000, 1 << 20};
    uint32_t seed = 1;
    for (int k = 0; k < 3; k++)
        for (int how = 0; how < PLACEMENTS; how++)
            for (int sf = 0; sf < FLAVOURS; sf++)
                for (int rf = 0; rf < RECV_FLAVOURS; rf++) ring(rank, size, sizes[k], how, sf, rf, seed++ * 7919u);
    for (int n = 1; n <= 4; n++) alltoallw_bottom(rank, size, n);
    alltoallw_bottom(rank, size, 70000);
    MPI_OK(MPI_Buffer_detach(&bbuf, &bsize));
    free(bbuf);
    ok("lower_bound");
    MPI_Finalize();
    return 0;
}
