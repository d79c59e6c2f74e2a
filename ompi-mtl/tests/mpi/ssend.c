/* Synchronous sends complete only once the receive has matched them. */
#include "common.h"
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    size_t lens[] = {0, 8, 4000, 100000};
    for (int i = 0; i < 4; i++) {
        size_t len = lens[i];
        unsigned char *b = xmalloc(len);
        if (rank == 0) {
            fill(b, len, (uint32_t) i);
            MPI_Request r;
            MPI_OK(MPI_Issend(b, (int) len, MPI_BYTE, 1, i, MPI_COMM_WORLD, &r));
            /* Rank 1 posts its receive only after our "go" message. */
            double t0 = MPI_Wtime();
            int flag = 0;
            while (MPI_Wtime() - t0 < 0.3) {
                MPI_OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
                CHECK(!flag, "Issend of %zu bytes completed before the receive was posted", len);
                usleep(1000);
            }
            int go = 1;
            MPI_OK(MPI_Send(&go, 1, MPI_INT, 1, 100 + i, MPI_COMM_WORLD));
            MPI_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            /* Blocking Ssend: takes at least the receiver's delay. */
            double t1 = MPI_Wtime();
            MPI_OK(MPI_Ssend(b, (int) len, MPI_BYTE, 1, 200 + i, MPI_COMM_WORLD));
            double dt = MPI_Wtime() - t1;
            CHECK(dt >= 0.15, "Ssend of %zu bytes returned after %.3f s, before the receive", len, dt);
        } else if (rank == 1) {
            int go;
            MPI_OK(MPI_Recv(&go, 1, MPI_INT, 0, 100 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MPI_OK(MPI_Recv(b, (int) len, MPI_BYTE, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(verify(b, len, (uint32_t) i) < 0, "Issend payload of %zu bytes", len);
            usleep(200000);
            MPI_OK(MPI_Recv(b, (int) len, MPI_BYTE, 0, 200 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(verify(b, len, (uint32_t) i) < 0, "Ssend payload of %zu bytes", len);
        }
        free(b);
    }
    /* A ring of Ssends with receives preposted. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, v = -1;
    MPI_Request r;
    MPI_OK(MPI_Irecv(&v, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &r));
    MPI_OK(MPI_Ssend(&rank, 1, MPI_INT, next, 9, MPI_COMM_WORLD));
    MPI_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(v == prev, "ring got %d", v);
    ok("ssend");
    MPI_Finalize();
    return 0;
}
