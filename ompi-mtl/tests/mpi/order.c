/* Non-overtaking order: every rank streams thousands of mixed-size messages (eager and
   rendezvous) to every other rank with a few tags; receivers use wildcards and check that
   each sender's messages arrive in sending order with intact contents. */
#include "common.h"

#define COUNT 2000

static size_t size_of_msg(uint32_t seed)
{
    uint32_t s = seed * 2246822519u + 1;
    uint32_t r = rnd(&s);
    switch (r % 8) {
    case 0: return 0;
    case 1: return 4 + r % 60;                 /* tiny */
    case 2: case 3: return 64 + r % 4000;      /* one frame or a few */
    case 4: case 5: return 4096 + r % 28000;   /* medium eager */
    case 6: return 30000 + r % 8000;           /* around the eager limit */
    default: return 40000 + r % 160000;        /* rendezvous */
    }
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int count = argc > 1 ? atoi(argv[1]) : COUNT;

    /* Senders: Isend in bursts of 32 to every peer, tag alternating 1/2 (receivers use
       ANY_TAG, so order across tags is checked too). */
    int peers = size - 1;
    MPI_Request *rq = xmalloc(sizeof(MPI_Request) * (size_t) (64 * size));
    unsigned char **bufs = xmalloc(sizeof(unsigned char *) * (size_t) (64 * size));
    int *next_seq = calloc((size_t) size, sizeof(int));
    int sent = 0, received = 0, total_recv = count * peers;
    unsigned char *rbuf = xmalloc(200000 + 8);
    while (sent < count || received < total_recv) {
        int n = 0;
        for (int b = 0; b < 32 && sent < count; b++, sent++) {
            for (int p = 0; p < size; p++) {
                if (p == rank) continue;
                uint32_t seed = (uint32_t) (rank * 1000003 + p * 7919 + sent);
                size_t len = size_of_msg(seed) + 8;
                unsigned char *m = xmalloc(len);
                fill(m, len, seed);
                memcpy(m, &sent, 4);
                memcpy(m + 4, &rank, 4);
                bufs[n] = m;
                MPI_OK(MPI_Isend(m, (int) len, MPI_BYTE, p, 1 + (sent & 1), MPI_COMM_WORLD, &rq[n++]));
            }
        }
        /* Receive what is there (and at least something while our sends wait). */
        int want = received < total_recv ? 32 * peers : 0;
        for (int k = 0; k < want && received < total_recv; k++) {
            MPI_Status s;
            MPI_OK(MPI_Recv(rbuf, 200000 + 8, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &s));
            int c, seq, who;
            MPI_Get_count(&s, MPI_BYTE, &c);
            memcpy(&seq, rbuf, 4);
            memcpy(&who, rbuf + 4, 4);
            CHECK(who == s.MPI_SOURCE, "sender %d in a message from %d", who, s.MPI_SOURCE);
            CHECK(seq == next_seq[who], "from %d: got message %d, expected %d (overtaken)", who, seq, next_seq[who]);
            CHECK(s.MPI_TAG == 1 + (seq & 1), "tag %d for message %d", s.MPI_TAG, seq);
            uint32_t seed = (uint32_t) (who * 1000003 + rank * 7919 + seq);
            CHECK((size_t) c == size_of_msg(seed) + 8, "length %d of message %d from %d", c, seq, who);
            unsigned char head[8];
            memcpy(head, rbuf, 8);
            fill(rbuf, 8, seed); /* the header overwrote the pattern's first 8 bytes */
            long bad = verify(rbuf, (size_t) c, seed);
            CHECK(bad < 0, "message %d from %d (%d bytes): byte %ld wrong", seq, who, c, bad);
            next_seq[who]++;
            received++;
        }
        MPI_OK(MPI_Waitall(n, rq, MPI_STATUSES_IGNORE));
        for (int i = 0; i < n; i++) free(bufs[i]);
    }
    free(rbuf);
    ok("order");
    MPI_Finalize();
    return 0;
}
