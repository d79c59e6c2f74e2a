/* A rank killed in the middle of a large transfer: the job must end with an error, not hang.
   Rank 1 receives a few large messages, then SIGKILLs itself while more are in flight; the
   others keep sending to it and receiving from it. */
#include "common.h"
#include <signal.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const size_t len = 8u << 20;
    unsigned char *b = xmalloc(len);
    fill(b, len, 1);
    for (int i = 0;; i++) {
        if (rank == 1) {
            MPI_Request r;
            MPI_OK(MPI_Irecv(b, (int) len, MPI_BYTE, 0, i, MPI_COMM_WORLD, &r));
            if (i == 3) {
                usleep(2000); /* the transfer is under way */
                fprintf(stderr, "rank 1: killing myself mid-transfer\n");
                raise(SIGKILL);
            }
            MPI_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        } else if (rank == 0) {
            int rc = MPI_Send(b, (int) len, MPI_BYTE, 1, i, MPI_COMM_WORLD);
            if (rc != MPI_SUCCESS) {
                char msg[MPI_MAX_ERROR_STRING];
                int n;
                MPI_Error_string(rc, msg, &n);
                fprintf(stderr, "rank 0: MPI_Send to the dead rank failed: %s\n", msg);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        } else {
            int v;
            MPI_OK(MPI_Recv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
        if (i > 1000) break;
    }
    MPI_Finalize();
    return 0;
}
