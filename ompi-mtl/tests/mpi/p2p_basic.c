/* Blocking and nonblocking send/receive, wildcards, zero-length and self messages. */
#include "common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* Ring with blocking calls (even ranks send first). */
    int token = -1, mine = 1000 + rank;
    if (rank % 2 == 0) {
        MPI_OK(MPI_Send(&mine, 1, MPI_INT, next, 7, MPI_COMM_WORLD));
        MPI_OK(MPI_Recv(&token, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else {
        MPI_OK(MPI_Recv(&token, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_OK(MPI_Send(&mine, 1, MPI_INT, next, 7, MPI_COMM_WORLD));
    }
    CHECK(token == 1000 + prev, "ring token %d", token);

    /* Nonblocking exchange with both neighbours, several tags and sizes. */
    enum { N = 8 };
    MPI_Request rq[4 * N];
    unsigned char *sbuf[2 * N], *rbuf[2 * N];
    int nr = 0;
    for (int i = 0; i < N; i++) {
        size_t len = (size_t) 1 << (i * 2); /* 1 B .. 16 KiB */
        for (int d = 0; d < 2; d++) {
            int k = 2 * i + d;
            rbuf[k] = xmalloc(len);
            sbuf[k] = xmalloc(len);
            int from = d ? next : prev, to = d ? prev : next;
            MPI_OK(MPI_Irecv(rbuf[k], (int) len, MPI_BYTE, from, 100 + k, MPI_COMM_WORLD, &rq[nr++]));
            fill(sbuf[k], len, (uint32_t) (rank * 1000 + k));
            MPI_OK(MPI_Isend(sbuf[k], (int) len, MPI_BYTE, to, 100 + k, MPI_COMM_WORLD, &rq[nr++]));
        }
    }
    MPI_Status st[4 * N];
    MPI_OK(MPI_Waitall(nr, rq, st));
    for (int i = 0; i < N; i++) {
        size_t len = (size_t) 1 << (i * 2);
        for (int d = 0; d < 2; d++) {
            int k = 2 * i + d, from = d ? next : prev;
            long bad = verify(rbuf[k], len, (uint32_t) (from * 1000 + k));
            CHECK(bad < 0, "message %d from %d: byte %ld wrong", k, from, bad);
            free(rbuf[k]);
            free(sbuf[k]);
        }
    }

    /* Wildcards: every rank sends to 0 with a distinct tag; 0 receives ANY_SOURCE, ANY_TAG. */
    if (rank == 0) {
        int seen[64] = {0};
        for (int i = 1; i < size; i++) {
            int v;
            MPI_Status s;
            MPI_OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &s));
            CHECK(s.MPI_TAG == 500 + s.MPI_SOURCE, "tag %d from %d", s.MPI_TAG, s.MPI_SOURCE);
            CHECK(v == s.MPI_SOURCE * 3, "value %d from %d", v, s.MPI_SOURCE);
            int c;
            MPI_Get_count(&s, MPI_INT, &c);
            CHECK(c == 1, "count %d", c);
            CHECK(!seen[s.MPI_SOURCE], "twice from %d", s.MPI_SOURCE);
            seen[s.MPI_SOURCE] = 1;
        }
        MPI_Barrier(MPI_COMM_WORLD); /* the next messages are sent after this */
        /* ANY_TAG with a specific source, ANY_SOURCE with a specific tag. */
        for (int i = 1; i < size; i++) {
            int v;
            MPI_Status s;
            MPI_OK(MPI_Recv(&v, 1, MPI_INT, i, MPI_ANY_TAG, MPI_COMM_WORLD, &s));
            CHECK(s.MPI_SOURCE == i && s.MPI_TAG == 600 && v == -i, "src %d tag %d v %d", s.MPI_SOURCE, s.MPI_TAG, v);
            MPI_OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 700 + i, MPI_COMM_WORLD, &s));
            CHECK(s.MPI_SOURCE == i && v == i * 7, "src %d v %d", s.MPI_SOURCE, v);
        }
    } else {
        int v = rank * 3;
        MPI_OK(MPI_Send(&v, 1, MPI_INT, 0, 500 + rank, MPI_COMM_WORLD));
        MPI_Barrier(MPI_COMM_WORLD);
        v = -rank;
        MPI_OK(MPI_Send(&v, 1, MPI_INT, 0, 600, MPI_COMM_WORLD));
        v = rank * 7;
        MPI_OK(MPI_Send(&v, 1, MPI_INT, 0, 700 + rank, MPI_COMM_WORLD));
    }

    /* Zero-length messages carry their envelope. */
    {
        MPI_Status s;
        MPI_Request r;
        MPI_OK(MPI_Irecv(NULL, 0, MPI_BYTE, prev, 42, MPI_COMM_WORLD, &r));
        MPI_OK(MPI_Send(NULL, 0, MPI_BYTE, next, 42, MPI_COMM_WORLD));
        MPI_OK(MPI_Wait(&r, &s));
        int c;
        MPI_Get_count(&s, MPI_BYTE, &c);
        CHECK(c == 0 && s.MPI_SOURCE == prev && s.MPI_TAG == 42, "c %d src %d tag %d", c, s.MPI_SOURCE, s.MPI_TAG);
    }

    /* Messages to oneself, small and large. */
    for (size_t len = 5; len <= (1u << 20); len *= 64) {
        unsigned char *a = xmalloc(len), *b = xmalloc(len);
        fill(a, len, 99);
        MPI_Request r[2];
        MPI_OK(MPI_Isend(a, (int) len, MPI_BYTE, rank, 9, MPI_COMM_WORLD, &r[0]));
        MPI_OK(MPI_Irecv(b, (int) len, MPI_BYTE, rank, 9, MPI_COMM_WORLD, &r[1]));
        MPI_OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK(verify(b, len, 99) < 0, "self message of %zu bytes", len);
        free(a);
        free(b);
    }

    /* Sendrecv and Sendrecv_replace around the ring. */
    {
        int out = rank, in = -1;
        MPI_OK(MPI_Sendrecv(&out, 1, MPI_INT, next, 11, &in, 1, MPI_INT, prev, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(in == prev, "sendrecv got %d", in);
        int v = rank;
        MPI_OK(MPI_Sendrecv_replace(&v, 1, MPI_INT, next, 12, prev, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(v == prev, "sendrecv_replace got %d", v);
    }

    /* Ready and buffered modes. */
    {
        int v = -1;
        MPI_Request r;
        MPI_OK(MPI_Irecv(&v, 1, MPI_INT, prev, 13, MPI_COMM_WORLD, &r));
        MPI_Barrier(MPI_COMM_WORLD); /* every receive is posted before the ready send */
        int out = rank + 77;
        MPI_OK(MPI_Rsend(&out, 1, MPI_INT, next, 13, MPI_COMM_WORLD));
        MPI_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(v == prev + 77, "rsend got %d", v);

        int bsize = 1 << 20;
        void *bbuf = xmalloc((size_t) bsize + MPI_BSEND_OVERHEAD);
        MPI_OK(MPI_Buffer_attach(bbuf, bsize + MPI_BSEND_OVERHEAD));
        unsigned char *big = xmalloc(100000), *got = xmalloc(100000);
        fill(big, 100000, (uint32_t) rank + 5);
        MPI_OK(MPI_Bsend(big, 100000, MPI_BYTE, next, 14, MPI_COMM_WORLD));
        memset(big, 0, 100000); /* the attached buffer holds the copy */
        MPI_OK(MPI_Recv(got, 100000, MPI_BYTE, prev, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(verify(got, 100000, (uint32_t) prev + 5) < 0, "bsend payload");
        int sz;
        MPI_OK(MPI_Buffer_detach(&bbuf, &sz));
        free(bbuf);
        free(big);
        free(got);
    }

    ok("p2p_basic");
    MPI_Finalize();
    return 0;
}
