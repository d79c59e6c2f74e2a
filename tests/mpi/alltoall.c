/* `alltoall [SIZE...] [-r ROUNDS]`: every rank Isends a message of each SIZE (default 4, 65536
   and 1048576 bytes) to every other rank and posts the matching Irecvs, then Waitall, and
   checks every byte. The traffic of a real all-to-all: each node's agent sees every rank of
   every other node as a peer at once, and every pair sends eager and rendezvous messages at
   the same moment. A hang here is the failure this program exists to catch (the test runner's
   timeout ends it). */
#include "../../ompi-mtl/tests/mpi/common.h"

int main(int argc, char **argv)
{
    int rank, np;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);

    size_t sizes[16];
    int nsizes = 0, rounds = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (nsizes < 16) {
            sizes[nsizes++] = (size_t) strtoull(argv[i], NULL, 10);
        }
    }
    if (nsizes == 0) {
        sizes[nsizes++] = 4;
        sizes[nsizes++] = 65536;
        sizes[nsizes++] = 1048576;
    }

    int nmsg = (np - 1) * nsizes;
    unsigned char **sbuf = xmalloc(sizeof(*sbuf) * nmsg);
    unsigned char **rbuf = xmalloc(sizeof(*rbuf) * nmsg);
    MPI_Request *req = xmalloc(sizeof(*req) * 2 * nmsg);
    for (int round = 0; round < rounds; round++) {
        int k = 0;
        for (int d = 1; d < np; d++) {
            int to = (rank + d) % np, from = (rank - d + np) % np;
            for (int s = 0; s < nsizes; s++, k++) {
                /* seed: (sender, receiver, size index, round) */
                uint32_t sseed = (uint32_t) ((rank * 1000 + to) * 16 + s) * 7 + round;
                rbuf[k] = xmalloc(sizes[s]);
                sbuf[k] = xmalloc(sizes[s]);
                fill(sbuf[k], sizes[s], sseed);
                memset(rbuf[k], 0, sizes[s]);
                MPI_OK(MPI_Irecv(rbuf[k], (int) sizes[s], MPI_BYTE, from, s, MPI_COMM_WORLD,
                                 &req[2 * k]));
                MPI_OK(MPI_Isend(sbuf[k], (int) sizes[s], MPI_BYTE, to, s, MPI_COMM_WORLD,
                                 &req[2 * k + 1]));
            }
        }
        MPI_OK(MPI_Waitall(2 * nmsg, req, MPI_STATUSES_IGNORE));
        k = 0;
        for (int d = 1; d < np; d++) {
            int from = (rank - d + np) % np;
            for (int s = 0; s < nsizes; s++, k++) {
                uint32_t rseed = (uint32_t) ((from * 1000 + rank) * 16 + s) * 7 + round;
                long bad = verify(rbuf[k], sizes[s], rseed);
                CHECK(bad < 0, "round %d: %zu B from rank %d: byte %ld wrong", round, sizes[s],
                      from, bad);
                free(rbuf[k]);
                free(sbuf[k]);
            }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("OK alltoall (%d ranks, %d sizes, %d rounds)\n", np, nsizes, rounds);
    free(sbuf);
    free(rbuf);
    free(req);
    MPI_Finalize();
    return 0;
}
