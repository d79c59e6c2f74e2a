/* `status_error CALL`: rank 1 sets status.MPI_ERROR to a marker, completes one receive-side
   call CALL (Probe, Iprobe, Mprobe, Improbe, Mrecv, Imrecv, Recv, Wait, Test, Sendrecv) of a
   message rank 0 sends, and prints `CALL MPI_ERROR kept` or `CALL MPI_ERROR overwritten
   (VALUE)`. MPI sets MPI_ERROR only in the multiple-completion calls (Waitall, Testsome, ...)
   when they return MPI_ERR_IN_STATUS; a single-completion call leaves it as the caller set
   it, as Open MPI's ob1 does. Exits 1 when it was overwritten. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define MARKER 4711

int main(int argc, char **argv)
{
    int rank, x = 7, y = 0, flag = 0, bad = 0;
    MPI_Status st;
    MPI_Message m;
    MPI_Request r;
    const char *call = argc > 1 ? argv[1] : "Probe";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        MPI_Send(&x, 1, MPI_INT, 1, 5, MPI_COMM_WORLD);
    } else if (rank == 1) {
        memset(&st, 0, sizeof st);
        st.MPI_ERROR = MARKER;
        int known = 1, rc = MPI_SUCCESS;
        if (!strcmp(call, "Probe")) {
            rc = MPI_Probe(0, 5, MPI_COMM_WORLD, &st);
        } else if (!strcmp(call, "Iprobe")) {
            do
                rc = MPI_Iprobe(0, 5, MPI_COMM_WORLD, &flag, &st);
            while (rc == MPI_SUCCESS && !flag);
        } else if (!strcmp(call, "Mprobe")) {
            rc = MPI_Mprobe(0, 5, MPI_COMM_WORLD, &m, &st);
        } else if (!strcmp(call, "Improbe")) {
            do
                rc = MPI_Improbe(0, 5, MPI_COMM_WORLD, &flag, &m, &st);
            while (rc == MPI_SUCCESS && !flag);
        } else if (!strcmp(call, "Mrecv")) {
            MPI_Mprobe(0, 5, MPI_COMM_WORLD, &m, MPI_STATUS_IGNORE);
            rc = MPI_Mrecv(&y, 1, MPI_INT, &m, &st);
        } else if (!strcmp(call, "Imrecv")) {
            MPI_Mprobe(0, 5, MPI_COMM_WORLD, &m, MPI_STATUS_IGNORE);
            MPI_Imrecv(&y, 1, MPI_INT, &m, &r);
            rc = MPI_Wait(&r, &st);
        } else if (!strcmp(call, "Recv")) {
            rc = MPI_Recv(&y, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &st);
        } else if (!strcmp(call, "Wait")) {
            MPI_Irecv(&y, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &r);
            rc = MPI_Wait(&r, &st);
        } else if (!strcmp(call, "Test")) {
            MPI_Irecv(&y, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &r);
            do
                rc = MPI_Test(&r, &flag, &st);
            while (rc == MPI_SUCCESS && !flag);
        } else if (!strcmp(call, "Sendrecv")) {
            rc = MPI_Sendrecv(&x, 0, MPI_INT, MPI_PROC_NULL, 0, &y, 1, MPI_INT, 0, 5,
                              MPI_COMM_WORLD, &st);
        } else {
            known = 0;
        }
        if (!known) {
            fprintf(stderr, "status_error: unknown call %s\n", call);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        /* The probes leave the message to receive. */
        if (!strcmp(call, "Probe") || !strcmp(call, "Iprobe"))
            MPI_Recv(&y, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (!strcmp(call, "Mprobe") || !strcmp(call, "Improbe"))
            MPI_Mrecv(&y, 1, MPI_INT, &m, MPI_STATUS_IGNORE);
        int count = -1;
        MPI_Get_count(&st, MPI_INT, &count);
        if (rc != MPI_SUCCESS || st.MPI_SOURCE != 0 || st.MPI_TAG != 5 || count != 1) {
            printf("%s returned %d with source %d tag %d count %d\n", call, rc, st.MPI_SOURCE,
                   st.MPI_TAG, count);
            bad = 1;
        }
        if (st.MPI_ERROR == MARKER) {
            printf("%s MPI_ERROR kept\n", call);
        } else {
            printf("%s MPI_ERROR overwritten (%d)\n", call, st.MPI_ERROR);
            bad = 1;
        }
        fflush(stdout);
    }
    MPI_Finalize();
    return bad;
}
