/* Truncation: receiving into a short buffer fails with MPI_ERR_TRUNCATE (MPI_ERRORS_RETURN),
   small and large, blocking and not; communication goes on normally afterwards. */
#include "common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    size_t lens[] = {100, 20000, 1 << 20};
    for (int i = 0; i < 3; i++) {
        size_t len = lens[i], short_len = len / 4;
        unsigned char *b = xmalloc(len);
        if (rank == 0) {
            fill(b, len, (uint32_t) i);
            MPI_OK(MPI_Send(b, (int) len, MPI_BYTE, 1, i, MPI_COMM_WORLD));
            MPI_OK(MPI_Send(b, (int) len, MPI_BYTE, 1, 10 + i, MPI_COMM_WORLD));
            MPI_OK(MPI_Send(b, (int) len, MPI_BYTE, 1, 20 + i, MPI_COMM_WORLD));
        } else if (rank == 1) {
            MPI_Status s;
            memset(b, 0, len);
            int rc = MPI_Recv(b, (int) short_len, MPI_BYTE, 0, i, MPI_COMM_WORLD, &s);
            int cls;
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE, "blocking receive of %zu into %zu: error class %d", len, short_len, cls);
            CHECK(verify(b, short_len, (uint32_t) i) < 0, "the truncated part must be delivered");
            CHECK(b[short_len] == 0, "wrote past the receive buffer");
            /* Nonblocking: Wait returns the error, the status holds it. */
            MPI_Request r;
            MPI_OK(MPI_Irecv(b, (int) short_len, MPI_BYTE, 0, 10 + i, MPI_COMM_WORLD, &r));
            rc = MPI_Wait(&r, &s);
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE, "Irecv+Wait: class %d", cls);
            MPI_Error_class(s.MPI_ERROR, &cls);
            int c;
            MPI_Get_count(&s, MPI_BYTE, &c);
            CHECK(s.MPI_SOURCE == 0 && s.MPI_TAG == 10 + i, "status src %d tag %d", s.MPI_SOURCE, s.MPI_TAG);
            /* Then the full message: nothing was lost or shifted. */
            MPI_OK(MPI_Recv(b, (int) len, MPI_BYTE, 0, 20 + i, MPI_COMM_WORLD, &s));
            CHECK(verify(b, len, (uint32_t) i) < 0, "message after truncation");
        }
        free(b);
    }
    /* Waitall reports MPI_ERR_IN_STATUS with the truncated one marked. Open MPI's Waitall
       returns at once if a request has already failed when it starts, marking those not
       complete yet MPI_ERR_PENDING; so the good message is sent and received first (its
       completion reaches this rank before the truncated one's), and the statuses do not
       depend on how the two messages' arrivals fall around the Waitall. */
    if (rank == 0) {
        int v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        MPI_OK(MPI_Send(v, 1, MPI_INT, 1, 51, MPI_COMM_WORLD));
        MPI_OK(MPI_Send(v, 8, MPI_INT, 1, 50, MPI_COMM_WORLD));
    } else if (rank == 1) {
        int a[2], b1[2];
        MPI_Request r[2];
        MPI_Status s[2];
        MPI_OK(MPI_Irecv(b1, 2, MPI_INT, 0, 51, MPI_COMM_WORLD, &r[1]));
        MPI_OK(MPI_Irecv(a, 2, MPI_INT, 0, 50, MPI_COMM_WORLD, &r[0]));
        int rc = MPI_Waitall(2, r, s);
        CHECK(rc == MPI_ERR_IN_STATUS, "Waitall returned %d", rc);
        int c0, c1;
        MPI_Error_class(s[0].MPI_ERROR, &c0);
        MPI_Error_class(s[1].MPI_ERROR, &c1);
        CHECK(c0 == MPI_ERR_TRUNCATE && c1 == MPI_SUCCESS, "statuses %d %d", c0, c1);
        CHECK(a[0] == 1 && a[1] == 2 && b1[0] == 1, "payloads");
    }
    ok("truncate");
    MPI_Finalize();
    return 0;
}
