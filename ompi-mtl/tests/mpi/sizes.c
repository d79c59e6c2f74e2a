/* Every size class from 0 B to 16 MiB (powers of two and their neighbours), contents
   checked, both directions; receives posted before the send (expected) and after it
   (unexpected). Rank pairs (0,1), (2,3), ... */
#include "common.h"

#define MAX (16u << 20)

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = rank ^ 1;
    if (peer >= size) peer = rank; /* odd count: the last rank talks to itself */
    unsigned char *s = xmalloc(MAX), *r = xmalloc(MAX);
    size_t sizes[256];
    int n = 0;
    sizes[n++] = 0;
    for (size_t p = 1; p <= MAX; p <<= 1) {
        if (p > 2) sizes[n++] = p - 1;
        sizes[n++] = p;
        if (p < MAX) sizes[n++] = p + 1;
    }
    /* Around the channel size and the eager limit (32 KiB by default) and the frame size. */
    size_t extra[] = {1400, 1450, 1500, 8972, 9000, 32767, 32768, 32769, 65535, 100000, 3000000};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) sizes[n++] = extra[i];

    for (int i = 0; i < n; i++) {
        size_t len = sizes[i];
        for (int mode = 0; mode < 2; mode++) {
            uint32_t seed = (uint32_t) (i * 4 + mode * 2 + (rank & 1));
            uint32_t peer_seed = (uint32_t) (i * 4 + mode * 2 + (peer & 1));
            fill(s, len, seed);
            memset(r, 0xEE, len < 64 ? 64 : (len > MAX ? MAX : len));
            MPI_Request rq[2];
            MPI_Status st;
            if (mode == 0) { /* expected: receive posted first */
                MPI_OK(MPI_Irecv(r, (int) len, MPI_BYTE, peer, i, MPI_COMM_WORLD, &rq[0]));
                MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
                MPI_OK(MPI_Isend(s, (int) len, MPI_BYTE, peer, i, MPI_COMM_WORLD, &rq[1]));
                MPI_OK(MPI_Wait(&rq[0], &st));
                MPI_OK(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
            } else { /* unexpected: send first, receive after a barrier */
                MPI_OK(MPI_Isend(s, (int) len, MPI_BYTE, peer, i, MPI_COMM_WORLD, &rq[1]));
                MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
                MPI_OK(MPI_Recv(r, (int) len, MPI_BYTE, peer, i, MPI_COMM_WORLD, &st));
                MPI_OK(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
            }
            int c;
            MPI_Get_count(&st, MPI_BYTE, &c);
            CHECK((size_t) c == len, "size %zu mode %d: count %d", len, mode, c);
            long bad = verify(r, len, peer_seed);
            CHECK(bad < 0, "size %zu mode %d: byte %ld wrong", len, mode, bad);
        }
        /* And blocking calls, one direction at a time. */
        if (len <= (4u << 20)) {
            uint32_t seed = (uint32_t) (7777 + i);
            if (rank < peer) {
                fill(s, len, seed);
                MPI_OK(MPI_Send(s, (int) len, MPI_BYTE, peer, 1000 + i, MPI_COMM_WORLD));
                MPI_OK(MPI_Recv(r, (int) len, MPI_BYTE, peer, 2000 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(verify(r, len, seed + 1) < 0, "blocking echo of %zu bytes", len);
            } else if (rank > peer) {
                MPI_OK(MPI_Recv(r, (int) len, MPI_BYTE, peer, 1000 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(verify(r, len, seed) < 0, "blocking receive of %zu bytes", len);
                fill(s, len, seed + 1);
                MPI_OK(MPI_Send(s, (int) len, MPI_BYTE, peer, 2000 + i, MPI_COMM_WORLD));
            }
        }
    }
    free(s);
    free(r);
    ok("sizes");
    MPI_Finalize();
    return 0;
}
