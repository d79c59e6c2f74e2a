/* `outstanding N`: requests that only the peer's later calls can complete, N at once per rank
   (ranks pair up: r and r + np/2). First the lower half posts N receives of 8 B, then
   everyone meets in a barrier, and only then does the upper half send; then the upper half
   posts N synchronous sends of 8 B and N standard sends of 64 KiB (rendezvous), the barrier
   again, and only then does the lower half receive them. Every byte is checked, in order.
   With a channel of fewer descriptors than these requests, the rank's next call used to wait
   for a free one forever (the ones held could only complete after the barrier): past the
   channel's size such a job now fails with an error after a minute, and the default holds
   16,384 requests. */
#include "../../ompi-mtl/tests/mpi/common.h"

#define SMALL 8
#define LARGE 65536

int main(int argc, char **argv)
{
    int rank, np;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    CHECK(np % 2 == 0, "needs an even number of ranks, not %d", np);
    int n = argc > 1 ? atoi(argv[1]) : 6000;
    int low = rank < np / 2, peer = low ? rank + np / 2 : rank - np / 2;
    MPI_Request *req = xmalloc(sizeof(*req) * 2 * (size_t) n);
    unsigned char *small = xmalloc((size_t) n * SMALL);
    /* One buffer for every rendezvous send (sends may share a buffer: MPI 3.0). */
    unsigned char *large = xmalloc(LARGE);

    /* Receives posted ahead of the barrier. */
    if (low) {
        memset(small, 0, (size_t) n * SMALL);
        for (int i = 0; i < n; i++)
            MPI_OK(MPI_Irecv(small + (size_t) i * SMALL, SMALL, MPI_BYTE, peer, 7,
                             MPI_COMM_WORLD, &req[i]));
    }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (low) {
        MPI_OK(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
        for (int i = 0; i < n; i++) {
            long bad = verify(small + (size_t) i * SMALL, SMALL, (uint32_t) i);
            CHECK(bad < 0, "pre-posted receive %d of %d: byte %ld wrong", i, n, bad);
        }
    } else {
        for (int i = 0; i < n; i++) {
            fill(small, SMALL, (uint32_t) i);
            MPI_OK(MPI_Send(small, SMALL, MPI_BYTE, peer, 7, MPI_COMM_WORLD));
        }
    }

    /* Synchronous and rendezvous sends posted ahead of the barrier. */
    if (!low) {
        fill(large, LARGE, (uint32_t) (2 * n));
        for (int i = 0; i < n; i++) {
            fill(small + (size_t) i * SMALL, SMALL, (uint32_t) (n + i));
            MPI_OK(MPI_Issend(small + (size_t) i * SMALL, SMALL, MPI_BYTE, peer, 8,
                              MPI_COMM_WORLD, &req[2 * i]));
            MPI_OK(MPI_Isend(large, LARGE, MPI_BYTE, peer, 9,
                             MPI_COMM_WORLD, &req[2 * i + 1]));
        }
    }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (!low) {
        MPI_OK(MPI_Waitall(2 * n, req, MPI_STATUSES_IGNORE));
    } else {
        for (int i = 0; i < n; i++) {
            MPI_OK(MPI_Recv(small, SMALL, MPI_BYTE, peer, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            long bad = verify(small, SMALL, (uint32_t) (n + i));
            CHECK(bad < 0, "synchronous send %d of %d: byte %ld wrong", i, n, bad);
            memset(large, 0, LARGE);
            MPI_OK(MPI_Recv(large, LARGE, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            bad = verify(large, LARGE, (uint32_t) (2 * n));
            CHECK(bad < 0, "rendezvous send %d of %d: byte %ld wrong", i, n, bad);
        }
    }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("OK outstanding %d\n", n);
    MPI_Finalize();
    return 0;
}
