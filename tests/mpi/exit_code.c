/* `exit_code RANK STATUS`: every rank joins an allreduce (traffic through the MTL) and
   finalizes cleanly, then RANK exits with STATUS, which `tigon run` must pass on. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int who = argc > 1 ? atoi(argv[1]) : 0;
    int code = argc > 2 ? atoi(argv[2]) : 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == who) {
        printf("rank %d exits with %d (sum %d)\n", rank, code, sum);
        return code;
    }
    return 0;
}
