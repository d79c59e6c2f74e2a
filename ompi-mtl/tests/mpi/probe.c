/* Probe, Iprobe, Mprobe/Mrecv and Improbe/Imrecv, with wildcards, small and large. */
#include "common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    size_t lens[] = {0, 17, 5000, 40000, 3 << 20};
    const int nl = 5;
    if (rank != 0) {
        for (int i = 0; i < nl; i++) {
            unsigned char *b = xmalloc(lens[i]);
            fill(b, lens[i], (uint32_t) (rank * 10 + i));
            for (int k = 0; k < 4; k++) /* one message per probe flavour */
                MPI_OK(MPI_Send(b, (int) lens[i], MPI_BYTE, 0, 1000 * rank + 10 * i + k, MPI_COMM_WORLD));
            free(b);
        }
    } else {
        for (int from = 1; from < size; from++) {
            for (int i = 0; i < nl; i++) {
                size_t len = lens[i];
                uint32_t seed = (uint32_t) (from * 10 + i);
                int t0 = 1000 * from + 10 * i; /* tags are unique per sender */
                unsigned char *b = xmalloc(len);
                MPI_Status s;
                int c, flag = 0;
                /* Probe (blocking), specific source, then receive. */
                MPI_OK(MPI_Probe(from, t0, MPI_COMM_WORLD, &s));
                MPI_Get_count(&s, MPI_BYTE, &c);
                CHECK(s.MPI_SOURCE == from && s.MPI_TAG == t0 && (size_t) c == len, "probe: src %d tag %d count %d", s.MPI_SOURCE, s.MPI_TAG, c);
                MPI_OK(MPI_Recv(b, c, MPI_BYTE, from, t0, MPI_COMM_WORLD, &s));
                CHECK(verify(b, len, seed) < 0, "probe+recv payload");
                /* Iprobe in a loop, ANY_SOURCE / ANY_TAG. */
                while (!flag) {
                    MPI_OK(MPI_Iprobe(from, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &s));
                }
                MPI_Get_count(&s, MPI_BYTE, &c);
                CHECK(s.MPI_TAG == t0 + 1 && (size_t) c == len, "iprobe: tag %d count %d", s.MPI_TAG, c);
                MPI_OK(MPI_Recv(b, c, MPI_BYTE, from, s.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(verify(b, len, seed) < 0, "iprobe+recv payload");
                /* Mprobe + Mrecv. */
                MPI_Message msg;
                MPI_OK(MPI_Mprobe(from, t0 + 2, MPI_COMM_WORLD, &msg, &s));
                MPI_Get_count(&s, MPI_BYTE, &c);
                CHECK((size_t) c == len && s.MPI_SOURCE == from, "mprobe count %d", c);
                memset(b, 0, len);
                MPI_OK(MPI_Mrecv(b, c, MPI_BYTE, &msg, &s));
                CHECK(msg == MPI_MESSAGE_NULL, "Mrecv must release the message");
                MPI_Get_count(&s, MPI_BYTE, &c);
                CHECK((size_t) c == len && s.MPI_TAG == t0 + 2, "mrecv count %d tag %d", c, s.MPI_TAG);
                CHECK(verify(b, len, seed) < 0, "mprobe+mrecv payload");
                /* Improbe (polling, wildcards) + Imrecv. */
                flag = 0;
                while (!flag) {
                    MPI_OK(MPI_Improbe(MPI_ANY_SOURCE, t0 + 3, MPI_COMM_WORLD, &flag, &msg, &s));
                }
                CHECK(s.MPI_SOURCE == from, "improbe source %d", s.MPI_SOURCE);
                MPI_Request r;
                memset(b, 0, len);
                MPI_OK(MPI_Imrecv(b, (int) len, MPI_BYTE, &msg, &r));
                MPI_OK(MPI_Wait(&r, &s));
                MPI_Get_count(&s, MPI_BYTE, &c);
                CHECK((size_t) c == len, "imrecv count %d", c);
                CHECK(verify(b, len, seed) < 0, "improbe+imrecv payload");
                free(b);
            }
        }
        /* A probe must not match a message another probe took. */
        int flag;
        MPI_Status s;
        MPI_OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &s));
        CHECK(!flag, "a message is left over (tag %d)", s.MPI_TAG);
    }
    ok("probe");
    MPI_Finalize();
    return 0;
}
