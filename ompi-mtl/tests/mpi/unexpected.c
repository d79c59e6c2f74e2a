/* Floods of unexpected messages: rank 0 sends thousands of small and some large messages to
   every other rank before they post a single receive; they then receive them in reverse tag
   order (each receive searches the unexpected queue), and finally with ANY_TAG. */
#include "common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int small = argc > 1 ? atoi(argv[1]) : 3000;
    const int large = 16;
    const size_t large_len = 1u << 20;

    if (rank == 0) {
        MPI_Request *rq = xmalloc(sizeof(MPI_Request) * (size_t) (size * large));
        unsigned char **lb = xmalloc(sizeof(void *) * (size_t) (size * large));
        int nl = 0;
        for (int p = 1; p < size; p++) {
            for (int i = 0; i < small; i++) {
                unsigned char m[256];
                size_t len = (size_t) (i % 256);
                fill(m, len, (uint32_t) (p * 100000 + i));
                MPI_OK(MPI_Send(m, (int) len, MPI_BYTE, p, i, MPI_COMM_WORLD));
            }
            for (int i = 0; i < large; i++) {
                lb[nl] = xmalloc(large_len);
                fill(lb[nl], large_len, (uint32_t) (p * 100000 + small + i));
                MPI_OK(MPI_Isend(lb[nl], (int) large_len, MPI_BYTE, p, small + i, MPI_COMM_WORLD, &rq[nl]));
                nl++;
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_OK(MPI_Waitall(nl, rq, MPI_STATUSES_IGNORE));
        for (int i = 0; i < nl; i++) free(lb[i]);
    } else {
        MPI_Barrier(MPI_COMM_WORLD); /* every small message is unexpected by now */
        unsigned char *buf = xmalloc(large_len);
        /* The large ones first (their data waits at the sender), newest first. */
        for (int i = large - 1; i >= 0; i--) {
            MPI_Status s;
            MPI_OK(MPI_Recv(buf, (int) large_len, MPI_BYTE, 0, small + i, MPI_COMM_WORLD, &s));
            CHECK(verify(buf, large_len, (uint32_t) (rank * 100000 + small + i)) < 0, "large %d", i);
        }
        /* Half of the small ones in reverse tag order... */
        for (int i = small - 1; i >= small / 2; i--) {
            MPI_Status s;
            MPI_OK(MPI_Recv(buf, 256, MPI_BYTE, 0, i, MPI_COMM_WORLD, &s));
            int c;
            MPI_Get_count(&s, MPI_BYTE, &c);
            CHECK(c == i % 256, "tag %d: %d bytes", i, c);
            CHECK(verify(buf, (size_t) c, (uint32_t) (rank * 100000 + i)) < 0, "tag %d contents", i);
        }
        /* ...the rest with ANY_TAG, which must come in sending order. */
        for (int i = 0; i < small / 2; i++) {
            MPI_Status s;
            MPI_OK(MPI_Recv(buf, 256, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &s));
            CHECK(s.MPI_TAG == i && s.MPI_SOURCE == 0, "expected tag %d, got %d from %d", i, s.MPI_TAG, s.MPI_SOURCE);
            CHECK(verify(buf, (size_t) (i % 256), (uint32_t) (rank * 100000 + i)) < 0, "tag %d contents", i);
        }
        free(buf);
    }
    ok("unexpected");
    MPI_Finalize();
    return 0;
}
