/* Duplicated and split communicators (and an intercommunicator): messages with the same tag
   and peers on different communicators never match each other. */
#include "common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    MPI_Comm dup, dup2, split;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_OK(MPI_Comm_dup(dup, &dup2));
    /* Same tag, same peers, three communicators: each receive gets its own communicator's
       message even though they are sent in the opposite order. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int a = rank * 10 + 1, b = rank * 10 + 2, c = rank * 10 + 3, x = -1, y = -1, z = -1;
    MPI_Request r[6];
    MPI_OK(MPI_Isend(&c, 1, MPI_INT, next, 5, dup2, &r[0]));
    MPI_OK(MPI_Isend(&b, 1, MPI_INT, next, 5, dup, &r[1]));
    MPI_OK(MPI_Isend(&a, 1, MPI_INT, next, 5, MPI_COMM_WORLD, &r[2]));
    MPI_OK(MPI_Irecv(&x, 1, MPI_INT, prev, 5, MPI_COMM_WORLD, &r[3]));
    MPI_OK(MPI_Irecv(&y, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &r[4]));
    MPI_OK(MPI_Irecv(&z, 1, MPI_INT, prev, 5, dup2, &r[5]));
    MPI_OK(MPI_Waitall(6, r, MPI_STATUSES_IGNORE));
    CHECK(x == prev * 10 + 1 && y == prev * 10 + 2 && z == prev * 10 + 3, "got %d %d %d", x, y, z);

    /* Split into even and odd ranks; ranks are renumbered in the new communicators. */
    MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &split)); /* reversed order */
    int srank, ssize;
    MPI_Comm_rank(split, &srank);
    MPI_Comm_size(split, &ssize);
    if (ssize > 1) {
        int sn = (srank + 1) % ssize, sp = (srank + ssize - 1) % ssize, got = -1;
        MPI_Status s;
        MPI_OK(MPI_Sendrecv(&rank, 1, MPI_INT, sn, 6, &got, 1, MPI_INT, MPI_ANY_SOURCE, 6, split, &s));
        CHECK(s.MPI_SOURCE == sp, "split: source %d, expected %d", s.MPI_SOURCE, sp);
        /* The world rank of split rank sp. */
        int wp;
        MPI_Group g1, g2;
        MPI_Comm_group(split, &g1);
        MPI_Comm_group(MPI_COMM_WORLD, &g2);
        MPI_Group_translate_ranks(g1, 1, &sp, g2, &wp);
        CHECK(got == wp, "split: got %d from world rank %d", got, wp);
        MPI_Group_free(&g1);
        MPI_Group_free(&g2);
        int sum = 0;
        MPI_OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, split));
        int want = 0;
        for (int i = rank % 2; i < size; i += 2) want += i;
        CHECK(sum == want, "allreduce on split: %d vs %d", sum, want);
    }
    /* An intercommunicator between the even and the odd group. */
    if (size >= 2) {
        MPI_Comm inter;
        /* Split rank 0 of each group is its highest world rank (keys are -rank). */
        int top_even = (size - 1) % 2 == 0 ? size - 1 : size - 2;
        int top_odd = (size - 1) % 2 == 1 ? size - 1 : size - 2;
        int remote_leader = rank % 2 == 0 ? top_odd : top_even;
        MPI_OK(MPI_Intercomm_create(split, 0, MPI_COMM_WORLD, remote_leader, 77, &inter));
        int rsize;
        MPI_Comm_remote_size(inter, &rsize);
        if (srank < rsize) {
            int v = rank, got = -1;
            MPI_Status s;
            MPI_OK(MPI_Sendrecv(&v, 1, MPI_INT, srank, 8, &got, 1, MPI_INT, srank, 8, inter, &s));
            CHECK(s.MPI_SOURCE == srank && got % 2 != rank % 2, "intercomm: got %d from %d", got, s.MPI_SOURCE);
        }
        MPI_Comm_free(&inter);
    }
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup2);
    MPI_Comm_free(&dup);
    ok("comms");
    MPI_Finalize();
    return 0;
}
