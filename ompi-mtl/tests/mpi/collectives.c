/* Collectives over the MTL (they use negative tags): barrier, bcast, reduce, allreduce,
   gather, scatter, allgather, alltoall, small and large. */
#include "common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 0; i < 20; i++) MPI_OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Bcast from every root, small and large. */
    for (size_t len = 1; len <= (4u << 20); len *= 32) {
        unsigned char *b = xmalloc(len);
        for (int root = 0; root < size; root++) {
            if (rank == root) fill(b, len, (uint32_t) (root + len));
            else memset(b, 0, len);
            MPI_OK(MPI_Bcast(b, (int) len, MPI_BYTE, root, MPI_COMM_WORLD));
            CHECK(verify(b, len, (uint32_t) (root + len)) < 0, "bcast of %zu from %d", len, root);
        }
        free(b);
    }
    /* Allreduce / reduce on ints and doubles, 1 to 1M elements. */
    for (int n = 1; n <= (1 << 20); n *= 16) {
        int *in = xmalloc(sizeof(int) * (size_t) n), *out = xmalloc(sizeof(int) * (size_t) n);
        for (int i = 0; i < n; i++) in[i] = rank + i;
        MPI_OK(MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        for (int i = 0; i < n; i++) CHECK(out[i] == size * (size - 1) / 2 + size * i, "allreduce[%d] = %d", i, out[i]);
        MPI_OK(MPI_Reduce(in, out, n, MPI_INT, MPI_MAX, size - 1, MPI_COMM_WORLD));
        if (rank == size - 1)
            for (int i = 0; i < n; i++) CHECK(out[i] == size - 1 + i, "reduce max[%d] = %d", i, out[i]);
        free(in);
        free(out);
    }
    double d = rank + 0.5, dsum;
    MPI_OK(MPI_Allreduce(&d, &dsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    CHECK(dsum == size * (size - 1) / 2.0 + size * 0.5, "double allreduce %g", dsum);

    /* Alltoall, small and large blocks. */
    for (int blk = 1; blk <= 65536; blk *= 64) {
        int *s = xmalloc(sizeof(int) * (size_t) blk * size), *r = xmalloc(sizeof(int) * (size_t) blk * size);
        for (int p = 0; p < size; p++)
            for (int i = 0; i < blk; i++) s[p * blk + i] = rank * 1000000 + p * 1000 + i % 1000;
        MPI_OK(MPI_Alltoall(s, blk, MPI_INT, r, blk, MPI_INT, MPI_COMM_WORLD));
        for (int p = 0; p < size; p++)
            for (int i = 0; i < blk; i++)
                CHECK(r[p * blk + i] == p * 1000000 + rank * 1000 + i % 1000, "alltoall block %d elem %d", p, i);
        free(s);
        free(r);
    }
    /* Gather / scatter / allgather. */
    {
        int *all = xmalloc(sizeof(int) * (size_t) size * 1000), mine[1000];
        for (int i = 0; i < 1000; i++) mine[i] = rank * 1000 + i;
        MPI_OK(MPI_Gather(mine, 1000, MPI_INT, all, 1000, MPI_INT, 0, MPI_COMM_WORLD));
        if (rank == 0)
            for (int i = 0; i < size * 1000; i++) CHECK(all[i] == i, "gather[%d]", i);
        MPI_OK(MPI_Allgather(mine, 1000, MPI_INT, all, 1000, MPI_INT, MPI_COMM_WORLD));
        for (int i = 0; i < size * 1000; i++) CHECK(all[i] == i, "allgather[%d]", i);
        if (rank == 0)
            for (int i = 0; i < size * 1000; i++) all[i] = -i;
        MPI_OK(MPI_Scatter(all, 1000, MPI_INT, mine, 1000, MPI_INT, 0, MPI_COMM_WORLD));
        for (int i = 0; i < 1000; i++) CHECK(mine[i] == -(rank * 1000 + i), "scatter[%d]", i);
        free(all);
    }
    ok("collectives");
    MPI_Finalize();
    return 0;
}
