/* What mpi4py's test_util_pkl5 and test_p2p_obj do (issue 13), without Python: matched probes
   (Mprobe/Improbe + Mrecv/Imrecv), synchronous sends (Issend) and receives freed while active,
   to this rank, to a rank of the same node (4 ranks) and to a rank of the other node, over
   sizes from 0 B to past the 32 KiB rendezvous threshold. Checks:
   - every message arrives intact, with the right status;
   - a synchronous send to this rank is complete once its receive has returned (the first
     MPI_Test / MPI_Testall after it says so), and never before a receive is posted;
   - the buffer of a receive freed while active (MPI_Request_free) is never written after
     MPI_Request_free returns (tigon's guarantee: the freed receive still takes its message,
     whose bytes are dropped); likewise an Imrecv tested once and then freed, as pkl5 does.
   argv[1]: rounds (default 2). Ranks on two nodes, the first half on the first. */
#include "common.h"

#define SCRIBBLE 0xEE
/* The agents' rendezvous threshold (tigon agent --rndv-threshold, 32 KiB by default). */
#define EAGER_MAX 32768

static const size_t sizes[] = {0,     1,     8,     100,   1400,  1500,   4096,   9000,
                               16384, 32767, 32768, 32769, 65536, 200000, 1 << 20};
#define NSIZES ((int) (sizeof(sizes) / sizeof(sizes[0])))

static int rank, size;

static void scribble(unsigned char *b, size_t n) { memset(b, SCRIBBLE, n); }

/* Whether b[0..n) still holds the scribble: no late write landed there. */
static long scribbled(const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != SCRIBBLE) return (long) i;
    return -1;
}

static void check_status(MPI_Status *s, int src, int tag, size_t len, const char *what)
{
    int c;
    MPI_Get_count(s, MPI_BYTE, &c);
    CHECK(s->MPI_SOURCE == src && s->MPI_TAG == tag && (size_t) c == len,
          "%s: source %d tag %d count %d, expected %d %d %zu", what, s->MPI_SOURCE, s->MPI_TAG,
          c, src, tag, len);
}

/* Leaves `v`-dependent bytes where the next call's stack frame will be. */
static __attribute__((noinline)) void dirty_stack(unsigned v)
{
    volatile unsigned char junk[16384];
    for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (unsigned char) (v * 37 + i * 11 + 1);
}

/* Blocking receives: Open MPI's cm PML puts their request on its own stack, uninitialised
   fields and all, with the MTL request in alloca'd memory before it. Whatever is there must
   not use up what the MTL needs to watch MPI_Request_free of the program's receives (the
   freed-receive checks below would then fail). */
static void blocking_receives(MPI_Comm self)
{
    for (unsigned k = 0; k < 8; k++) {
        int v = (int) k, got = -1;
        MPI_OK(MPI_Send(&v, 1, MPI_INT, 0, 50, self));
        dirty_stack(k);
        MPI_OK(MPI_Recv(&got, 1, MPI_INT, 0, 50, self, MPI_STATUS_IGNORE));
        CHECK(got == v, "blocking receive %u got %d", k, got);
    }
}

/* To this rank, on a duplicate of MPI_COMM_SELF (wildcards see only our own messages). */
static void to_self(MPI_Comm self, uint32_t round)
{
    for (int i = 0; i < NSIZES; i++) {
        size_t len = sizes[i];
        uint32_t seed = round * 1000 + (uint32_t) i;
        unsigned char *sb = xmalloc(len), *rb = xmalloc(len);
        fill(sb, len, seed);
        MPI_Request rs, rr;
        MPI_Status s;
        MPI_Message msg;
        int flag;

        /* Issend, Mprobe with wildcards, Mrecv, Wait (pkl5 testMessage). */
        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, 0, 1, self, &rs));
        MPI_OK(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, self, &msg, &s));
        check_status(&s, 0, 1, len, "mprobe");
        memset(rb, 0, len);
        MPI_OK(MPI_Mrecv(rb, (int) len, MPI_BYTE, &msg, &s));
        check_status(&s, 0, 1, len, "mrecv");
        CHECK(verify(rb, len, seed) < 0, "mrecv of %zu bytes", len);
        MPI_OK(MPI_Test(&rs, &flag, MPI_STATUS_IGNORE));
        CHECK(flag, "Issend of %zu bytes to self not complete after its Mrecv returned", len);

        /* Issend, Improbe until found, Imrecv, Wait; the send completes with the receive. */
        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, 0, 2, self, &rs));
        do {
            MPI_OK(MPI_Improbe(0, 2, self, &flag, &msg, &s));
        } while (!flag);
        check_status(&s, 0, 2, len, "improbe");
        memset(rb, 0, len);
        MPI_OK(MPI_Imrecv(rb, (int) len, MPI_BYTE, &msg, &rr));
        MPI_OK(MPI_Wait(&rr, &s));
        check_status(&s, 0, 2, len, "imrecv");
        CHECK(verify(rb, len, seed) < 0, "imrecv of %zu bytes", len);
        MPI_OK(MPI_Test(&rs, &flag, MPI_STATUS_IGNORE));
        CHECK(flag, "Issend of %zu bytes to self not complete after its Imrecv completed", len);

        /* pkl5's last loop: Imrecv, one Test, and the request is let go (freed here, as
           dropping it is not C) with its buffer: under memcheck (tests/chaos.rs) a late
           write by the MTL is an invalid write; without, the next part catches it. */
        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, 0, 3, self, &rs));
        MPI_OK(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, self, &msg, &s));
        MPI_OK(MPI_Imrecv(rb, (int) len, MPI_BYTE, &msg, &rr));
        MPI_OK(MPI_Test(&rr, &flag, MPI_STATUS_IGNORE));
        if (!flag) MPI_OK(MPI_Request_free(&rr));
        free(rb);
        rb = xmalloc(len);
        MPI_OK(MPI_Wait(&rs, MPI_STATUS_IGNORE)); /* the receive has all of it now */

        /* A posted receive freed while active still takes its message; nothing is written. */
        MPI_OK(MPI_Irecv(rb, (int) len, MPI_BYTE, 0, 4, self, &rr));
        MPI_OK(MPI_Request_free(&rr));
        scribble(rb, len);
        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, 0, 4, self, &rs));
        MPI_OK(MPI_Wait(&rs, MPI_STATUS_IGNORE));
        long at = scribbled(rb, len);
        CHECK(at < 0, "freed Irecv of %zu bytes wrote its buffer (byte %ld) after the free", len,
              at);
        MPI_OK(MPI_Iprobe(0, 4, self, &flag, MPI_STATUS_IGNORE));
        CHECK(!flag, "the freed receive of %zu bytes did not take its message", len);

        /* The same with a persistent receive (another kind of PML request). */
        MPI_OK(MPI_Recv_init(rb, (int) len, MPI_BYTE, 0, 8, self, &rr));
        MPI_OK(MPI_Start(&rr));
        MPI_OK(MPI_Request_free(&rr));
        scribble(rb, len);
        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, 0, 8, self, &rs));
        MPI_OK(MPI_Wait(&rs, MPI_STATUS_IGNORE));
        at = scribbled(rb, len);
        CHECK(at < 0, "freed persistent receive of %zu bytes wrote its buffer (byte %ld)", len,
              at);

        /* An mprobed message whole at the node is received within MPI_Imrecv (as Open MPI's
           own PMLs do; mpi4py's pkl5 tests such a request once, then drops it with its
           buffer). A message to this rank is at the node once a later one has arrived behind
           it, at every size: an eager one whole, a rendezvous one (past the threshold, or
           eager-sized without credit left) in its sender's memory, which the agent reads. */
        MPI_OK(MPI_Isend(sb, (int) len, MPI_BYTE, 0, 6, self, &rs));
        MPI_OK(MPI_Send(NULL, 0, MPI_BYTE, 0, 7, self));
        MPI_OK(MPI_Recv(NULL, 0, MPI_BYTE, 0, 7, self, MPI_STATUS_IGNORE));
        MPI_OK(MPI_Mprobe(0, 6, self, &msg, &s));
        memset(rb, 0, len);
        MPI_OK(MPI_Imrecv(rb, (int) len, MPI_BYTE, &msg, &rr));
        MPI_OK(MPI_Test(&rr, &flag, &s));
        CHECK(flag, "Imrecv of a whole %zu-byte message not complete at its first Test", len);
        check_status(&s, 0, 6, len, "imrecv of a whole message");
        CHECK(verify(rb, len, seed) < 0, "imrecv of a whole %zu-byte message", len);
        MPI_OK(MPI_Wait(&rs, MPI_STATUS_IGNORE));

        /* An Issend freed while active (pkl5's request.free()) is still delivered. */
        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, 0, 5, self, &rs));
        MPI_OK(MPI_Request_free(&rs));
        memset(rb, 0, len);
        MPI_OK(MPI_Recv(rb, (int) len, MPI_BYTE, 0, 5, self, &s));
        check_status(&s, 0, 5, len, "recv of a freed Issend");
        CHECK(verify(rb, len, seed) < 0, "freed Issend of %zu bytes", len);
        free(sb);
        free(rb);
    }
}

/* testManyISSendAndRecv: six Issends to self, received one by one. */
static void many_issend(MPI_Comm self, uint32_t round)
{
    for (int i = 0; i < NSIZES; i++) {
        size_t len = sizes[i];
        MPI_Request rs[6];
        unsigned char *sb[6], *rb = xmalloc(len);
        int flag;
        for (int k = 0; k < 6; k++) {
            sb[k] = xmalloc(len);
            fill(sb[k], len, round * 100 + (uint32_t) (i * 6 + k));
            MPI_OK(MPI_Issend(sb[k], (int) len, MPI_BYTE, 0, 0, self, &rs[k]));
        }
        MPI_OK(MPI_Testall(6, rs, &flag, MPI_STATUSES_IGNORE));
        CHECK(!flag, "Issends of %zu bytes complete before any receive", len);
        for (int k = 0; k < 6; k++) {
            MPI_OK(MPI_Recv(rb, (int) len, MPI_BYTE, 0, 0, self, MPI_STATUS_IGNORE));
            CHECK(verify(rb, len, round * 100 + (uint32_t) (i * 6 + k)) < 0,
                  "message %d of %zu bytes", k, len);
            int done;
            MPI_OK(MPI_Test(&rs[k], &done, MPI_STATUS_IGNORE));
            CHECK(done, "Issend %d of %zu bytes not complete after its receive returned", k, len);
        }
        MPI_OK(MPI_Testall(6, rs, &flag, MPI_STATUSES_IGNORE));
        CHECK(flag, "Testall false after every receive of %zu bytes returned", len);
        for (int k = 0; k < 6; k++) free(sb[k]);
        free(rb);
    }
}

/* With `peer` (another rank): Issend + Mprobe/Mrecv both ways, then a receive freed while
   active that the peer's Issend matches. */
static void with_peer(int peer, uint32_t round)
{
    MPI_Comm w = MPI_COMM_WORLD;
    for (int i = 0; i < NSIZES; i++) {
        size_t len = sizes[i];
        uint32_t mine = round * 1000 + (uint32_t) (rank * 50 + i);
        uint32_t theirs = round * 1000 + (uint32_t) (peer * 50 + i);
        unsigned char *sb = xmalloc(len), *rb = xmalloc(len), *fb = xmalloc(len);
        fill(sb, len, mine);
        MPI_Request rs, rf;
        MPI_Status s;
        MPI_Message msg;
        int flag, token = 0;

        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, peer, 10, w, &rs));
        MPI_OK(MPI_Mprobe(peer, 10, w, &msg, &s));
        check_status(&s, peer, 10, len, "mprobe from the peer");
        memset(rb, 0, len);
        MPI_OK(MPI_Mrecv(rb, (int) len, MPI_BYTE, &msg, &s));
        CHECK(verify(rb, len, theirs) < 0, "mrecv of %zu bytes from %d", len, peer);
        MPI_OK(MPI_Wait(&rs, MPI_STATUS_IGNORE));

        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, peer, 11, w, &rs));
        do {
            MPI_OK(MPI_Improbe(MPI_ANY_SOURCE, 11, w, &flag, &msg, &s));
        } while (!flag);
        check_status(&s, peer, 11, len, "improbe from the peer");
        memset(rb, 0, len);
        MPI_Request rr;
        MPI_OK(MPI_Imrecv(rb, (int) len, MPI_BYTE, &msg, &rr));
        MPI_OK(MPI_Wait(&rr, MPI_STATUS_IGNORE));
        CHECK(verify(rb, len, theirs) < 0, "imrecv of %zu bytes from %d", len, peer);
        MPI_OK(MPI_Wait(&rs, MPI_STATUS_IGNORE));

        /* An eager-sized message from the peer, too (see to_self): whole at the node, or,
           if it went by rendezvous for lack of credit, pulled from the peer's agent within
           MPI_Imrecv. */
        if (len <= EAGER_MAX) {
            MPI_OK(MPI_Send(sb, (int) len, MPI_BYTE, peer, 15, w));
            MPI_OK(MPI_Send(NULL, 0, MPI_BYTE, peer, 16, w));
            MPI_OK(MPI_Recv(NULL, 0, MPI_BYTE, peer, 16, w, MPI_STATUS_IGNORE));
            MPI_OK(MPI_Mprobe(peer, 15, w, &msg, &s));
            memset(rb, 0, len);
            MPI_OK(MPI_Imrecv(rb, (int) len, MPI_BYTE, &msg, &rr));
            MPI_OK(MPI_Test(&rr, &flag, MPI_STATUS_IGNORE));
            CHECK(flag, "Imrecv of a whole %zu-byte message from %d not complete at once", len,
                  peer);
            CHECK(verify(rb, len, theirs) < 0, "imrecv of a whole %zu-byte message", len);
        }

        /* Freed receive: posted and freed before the peer may send (tag 13 says it may). */
        MPI_OK(MPI_Irecv(fb, (int) len, MPI_BYTE, peer, 12, w, &rf));
        MPI_OK(MPI_Request_free(&rf));
        scribble(fb, len);
        MPI_OK(MPI_Sendrecv(&token, 1, MPI_INT, peer, 13, &flag, 1, MPI_INT, peer, 13, w,
                            MPI_STATUS_IGNORE));
        MPI_OK(MPI_Issend(sb, (int) len, MPI_BYTE, peer, 12, w, &rs));
        MPI_OK(MPI_Wait(&rs, MPI_STATUS_IGNORE)); /* the peer's freed receive took it */
        /* Tag 14: "your message was taken"; behind the freed receive's completion on the
           peer's side, so when it arrives any late write would have landed. */
        MPI_OK(MPI_Sendrecv(&token, 1, MPI_INT, peer, 14, &flag, 1, MPI_INT, peer, 14, w,
                            MPI_STATUS_IGNORE));
        long at = scribbled(fb, len);
        CHECK(at < 0, "freed Irecv of %zu bytes from %d wrote its buffer (byte %ld)", len, peer,
              at);
        MPI_OK(MPI_Iprobe(peer, 12, w, &flag, MPI_STATUS_IGNORE));
        CHECK(!flag, "the freed receive of %zu bytes from %d did not take its message", len,
              peer);
        free(sb);
        free(rb);
        free(fb);
    }
}

/* More receives than the channel has data buffers (256): the later ones are written in place
   by the agent. Every other one is freed while active; its buffer must stay as scribbled. */
static void many_freed(MPI_Comm self, uint32_t round)
{
    enum { N = 300, LEN = 64 };
    static unsigned char bufs[N][LEN];
    MPI_Request r[N];
    for (int k = 0; k < N; k++) {
        MPI_OK(MPI_Irecv(bufs[k], LEN, MPI_BYTE, 0, 100 + k, self, &r[k]));
        if (k % 2 == 0) {
            MPI_OK(MPI_Request_free(&r[k]));
            scribble(bufs[k], LEN);
        }
    }
    unsigned char m[LEN];
    for (int k = 0; k < N; k++) {
        fill(m, LEN, round * 7 + (uint32_t) k);
        MPI_OK(MPI_Send(m, LEN, MPI_BYTE, 0, 100 + k, self));
    }
    /* The last receive is a live one: the freed ones, earlier in the same stream, are done. */
    MPI_OK(MPI_Waitall(N, r, MPI_STATUSES_IGNORE));
    for (int k = 0; k < N; k++) {
        if (k % 2 == 0) {
            long at = scribbled(bufs[k], LEN);
            CHECK(at < 0, "freed receive %d (of %d posted) written at byte %ld", k, N, at);
        } else {
            CHECK(verify(bufs[k], LEN, round * 7 + (uint32_t) k) < 0, "receive %d", k);
        }
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2 && size % 2 == 0, "needs an even number of ranks, 2 or more");
    int rounds = argc > 1 ? atoi(argv[1]) : 2;
    MPI_Comm self;
    MPI_OK(MPI_Comm_dup(MPI_COMM_SELF, &self));
    /* Ranks 0..size/2-1 are on the first node: the partner across is rank +- size/2, the
       neighbour on the same node (4 ranks or more) is rank ^ 1. */
    int half = size / 2;
    int across = rank < half ? rank + half : rank - half;
    blocking_receives(self);
    for (int round = 0; round < rounds; round++) {
        to_self(self, (uint32_t) round);
        many_issend(self, (uint32_t) round);
        many_freed(self, (uint32_t) round);
        with_peer(across, (uint32_t) round);
        if (half >= 2) with_peer(rank ^ 1, (uint32_t) round);
    }
    MPI_OK(MPI_Comm_free(&self));
    ok("sync_probe_free");
    MPI_Finalize();
    return 0;
}
