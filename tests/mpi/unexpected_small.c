/* `unexpected_small [COUNT [SIZE]]`: rank 0 sends COUNT (default 400) messages of SIZE
   (default 200) bytes to rank 1 before rank 1 posts any receive (a barrier after the sends:
   a standard send of a small message completes once the receiving node has it), so every
   one waits in rank 1's node as an unexpected message; rank 1 then receives them in order and
   checks each byte. Nothing else of size is sent: `tigon run --stats` shows the copies per
   payload byte of unexpected small messages (400 of 200 B stay within the first eager credit
   a node grants, so none goes by rendezvous). Prints "OK unexpected_small" from rank 0. */
#include "../../ompi-mtl/tests/mpi/common.h"

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int count = argc > 1 ? atoi(argv[1]) : 400;
    int size = argc > 2 ? atoi(argv[2]) : 200;
    unsigned char *buf = malloc((size_t) size + 1);
    CHECK(buf != NULL, "malloc");
    if (rank == 0) {
        for (int i = 0; i < count; i++) {
            fill(buf, (size_t) size, (uint32_t) i);
            MPI_OK(MPI_Send(buf, size, MPI_BYTE, 1, i, MPI_COMM_WORLD));
        }
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < count; i++) {
            MPI_Status s;
            int c;
            MPI_OK(MPI_Recv(buf, size, MPI_BYTE, 0, i, MPI_COMM_WORLD, &s));
            MPI_Get_count(&s, MPI_BYTE, &c);
            CHECK(c == size, "message %d: %d bytes", i, c);
            CHECK(verify(buf, (size_t) size, (uint32_t) i) < 0, "message %d contents", i);
        }
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("OK unexpected_small\n");
    free(buf);
    MPI_Finalize();
    return 0;
}
