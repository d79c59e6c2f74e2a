/* MPI_Cancel of receives: an unmatched one is cancelled (MPI_Test_cancelled), a matched one
   is not and delivers its data; sends are left alone. */
#include "common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    size_t lens[] = {4, 50000};
    for (int i = 0; i < 2; i++) {
        size_t len = lens[i];
        unsigned char *b = xmalloc(len);
        if (rank == 1) {
            /* Never matched: cancelled. */
            MPI_Request r;
            MPI_Status s;
            int flag;
            MPI_OK(MPI_Irecv(b, (int) len, MPI_BYTE, 0, 999, MPI_COMM_WORLD, &r));
            MPI_OK(MPI_Cancel(&r));
            MPI_OK(MPI_Wait(&r, &s));
            MPI_OK(MPI_Test_cancelled(&s, &flag));
            CHECK(flag, "unmatched receive of %zu bytes not cancelled", len);
            /* ANY_SOURCE, cancelled while messages flow on other tags. */
            MPI_OK(MPI_Irecv(b, (int) len, MPI_BYTE, MPI_ANY_SOURCE, 998, MPI_COMM_WORLD, &r));
            MPI_OK(MPI_Recv(b, (int) len, MPI_BYTE, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MPI_OK(MPI_Cancel(&r));
            MPI_OK(MPI_Wait(&r, &s));
            MPI_OK(MPI_Test_cancelled(&s, &flag));
            CHECK(flag, "ANY_SOURCE receive not cancelled");
            /* Matched: not cancelled, data intact. */
            MPI_OK(MPI_Irecv(b, (int) len, MPI_BYTE, 0, 10 + i, MPI_COMM_WORLD, &r));
            int go = 1;
            MPI_OK(MPI_Send(&go, 1, MPI_INT, 0, 20 + i, MPI_COMM_WORLD));
            MPI_OK(MPI_Recv(&go, 1, MPI_INT, 0, 30 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            /* By now the message has arrived and matched (eager) or announced itself. */
            do {
                MPI_OK(MPI_Request_get_status(r, &flag, &s));
            } while (!flag && len < 32768);
            MPI_OK(MPI_Cancel(&r));
            MPI_OK(MPI_Wait(&r, &s));
            MPI_OK(MPI_Test_cancelled(&s, &flag));
            CHECK(!flag, "a matched receive was cancelled");
            CHECK(verify(b, len, (uint32_t) (7 + i)) < 0, "payload of the matched receive");
        } else if (rank == 0) {
            fill(b, len, (uint32_t) (7 + i));
            MPI_OK(MPI_Send(b, (int) len, MPI_BYTE, 1, i, MPI_COMM_WORLD));
            int go;
            MPI_OK(MPI_Recv(&go, 1, MPI_INT, 1, 20 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MPI_Request r;
            MPI_OK(MPI_Isend(b, (int) len, MPI_BYTE, 1, 10 + i, MPI_COMM_WORLD, &r));
            MPI_OK(MPI_Send(&go, 1, MPI_INT, 1, 30 + i, MPI_COMM_WORLD));
            MPI_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        }
        free(b);
    }
    /* Cancelling a send: allowed to fail; the message must still arrive exactly once. */
    if (rank == 0) {
        int v = 42;
        MPI_Request r;
        MPI_Status s;
        int flag;
        MPI_OK(MPI_Isend(&v, 1, MPI_INT, 1, 77, MPI_COMM_WORLD, &r));
        MPI_OK(MPI_Cancel(&r));
        MPI_OK(MPI_Wait(&r, &s));
        MPI_OK(MPI_Test_cancelled(&s, &flag));
        CHECK(!flag, "tigon does not cancel sends");
    } else if (rank == 1) {
        int v = 0;
        MPI_OK(MPI_Recv(&v, 1, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(v == 42, "send after cancel attempt: %d", v);
    }
    ok("cancel");
    MPI_Finalize();
    return 0;
}
