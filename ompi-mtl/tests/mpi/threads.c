/* MPI_THREAD_MULTIPLE: 4 threads per rank exchange messages concurrently (each thread pairs
   with the same thread of the neighbour ranks through its own tag range), with mixed sizes,
   nonblocking and blocking calls, probes and a wildcard receiver. */
#include "common.h"
#include <pthread.h>

#define THREADS 4
static int rank, size, iters = 300;

static void *worker(void *arg)
{
    int t = (int) (long) arg;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char *s = xmalloc(200000), *r = xmalloc(200000);
    uint32_t st = (uint32_t) (rank * 31 + t + 1);
    for (int i = 0; i < iters; i++) {
        size_t len = (i % 10 == 9) ? 50000 + (size_t) (rnd(&st) % 100000) : rnd(&st) % 3000;
        int tag = t * 100000 + i;
        fill(s, len, (uint32_t) (rank * 7 + tag));
        MPI_Request rq[2];
        MPI_Status stt;
        MPI_OK(MPI_Irecv(r, 200000, MPI_BYTE, prev, tag, MPI_COMM_WORLD, &rq[0]));
        if (i % 3 == 0) {
            MPI_OK(MPI_Send(s, (int) len, MPI_BYTE, next, tag, MPI_COMM_WORLD));
            MPI_OK(MPI_Wait(&rq[0], &stt));
        } else {
            MPI_OK(MPI_Isend(s, (int) len, MPI_BYTE, next, tag, MPI_COMM_WORLD, &rq[1]));
            MPI_Status sts[2];
            MPI_OK(MPI_Waitall(2, rq, sts));
            stt = sts[0];
        }
        int c;
        MPI_Get_count(&stt, MPI_BYTE, &c);
        uint32_t pst = (uint32_t) (prev * 31 + t + 1);
        for (int k = 0; k <= i; k++) { /* replay the neighbour's size sequence */
            size_t l2 = (k % 10 == 9) ? 50000 + (size_t) (rnd(&pst) % 100000) : rnd(&pst) % 3000;
            if (k == i) CHECK((size_t) c == l2, "thread %d iter %d: %d bytes, expected %zu", t, i, c, l2);
        }
        CHECK(stt.MPI_TAG == tag && stt.MPI_SOURCE == prev, "thread %d: tag %d src %d", t, stt.MPI_TAG, stt.MPI_SOURCE);
        long bad = verify(r, (size_t) c, (uint32_t) (prev * 7 + tag));
        CHECK(bad < 0, "thread %d iter %d: byte %ld wrong", t, i, bad);
        if (i % 50 == 0) { /* a probe in the middle of the traffic */
            int v = i, got, flag = 0;
            MPI_OK(MPI_Send(&v, 1, MPI_INT, next, 900000 + t, MPI_COMM_WORLD));
            while (!flag) MPI_OK(MPI_Iprobe(prev, 900000 + t, MPI_COMM_WORLD, &flag, &stt));
            MPI_OK(MPI_Recv(&got, 1, MPI_INT, prev, 900000 + t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(got == i, "probe round %d got %d", i, got);
        }
    }
    free(s);
    free(r);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided thread level %d", provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1) iters = atoi(argv[1]);
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *) t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    ok("threads");
    MPI_Finalize();
    return 0;
}
