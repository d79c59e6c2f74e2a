/* `stress SECONDS [SEED]`: each rank and its partner (rank ^ 1) exchange rounds of messages
   of mixed sizes — tiny, around the frame and the eager threshold, rendezvous up to 1 MiB —
   over a few tags, every byte and length checked, until rank 0 says SECONDS have passed.
   Then each rank prints
       stress rank R: sent S received V bad B
   (S messages sent, V received intact, B received with a wrong length or content) and exits
   1 if B > 0; about every second before that, the same counts so far as
       stress rank R at T s: sent S received V bad B
   (so that a job whose rank is killed still shows what it received). A lost message never
   completes its round: the job then hangs, which the caller (`tigon soak`) detects. Run with
   an even number of ranks. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PER_ROUND 8
#define MAX_SIZE (1 << 20)

static const int SIZES[] = {0,     1,     8,     64,    1000,   1500,   4096,
                            9000,  32768, 32769, 65536, 100000, 262144, 1048576};
#define N_SIZES ((long)(sizeof SIZES / sizeof SIZES[0]))

/* The size of message `i` of round `round` from rank `src`: both sides compute it. */
static int size_of(long round, int i, int src)
{
    uint64_t x = (uint64_t)round * 0x9e3779b97f4a7c15ULL + (uint64_t)(i * 7 + src * 13);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 32;
    /* Large messages are rarer, so that rounds stay short on a shared machine. */
    long k = (long)(x % (uint64_t)(N_SIZES * 2));
    return SIZES[k < N_SIZES ? k : k % (N_SIZES - 3)];
}

static unsigned char byte_of(long round, int i, int src, long j, unsigned seed)
{
    return (unsigned char)((round * 31 + i * 17 + src * 101 + j * 131 + seed) & 0xff);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double seconds = argc > 1 ? atof(argv[1]) : 10.0;
    unsigned seed = argc > 2 ? (unsigned)atoi(argv[2]) : 1;
    if (size % 2 != 0) {
        if (rank == 0)
            fprintf(stderr, "stress: run with an even number of ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int partner = rank ^ 1;
    unsigned char *sbuf[PER_ROUND], *rbuf[PER_ROUND];
    for (int i = 0; i < PER_ROUND; i++) {
        sbuf[i] = malloc(MAX_SIZE);
        rbuf[i] = malloc(MAX_SIZE);
    }
    long long sent = 0, received = 0, bad = 0;
    double t0 = MPI_Wtime(), last_report = t0;
    int stop = 0;
    for (long round = 0; !stop; round++) {
        MPI_Request req[2 * PER_ROUND];
        for (int i = 0; i < PER_ROUND; i++)
            MPI_Irecv(rbuf[i], MAX_SIZE, MPI_BYTE, partner, i % 3, MPI_COMM_WORLD, &req[i]);
        for (int i = 0; i < PER_ROUND; i++) {
            int n = size_of(round, i, rank);
            for (long j = 0; j < n; j++)
                sbuf[i][j] = byte_of(round, i, rank, j, seed);
            MPI_Isend(sbuf[i], n, MPI_BYTE, partner, i % 3, MPI_COMM_WORLD,
                      &req[PER_ROUND + i]);
        }
        MPI_Status st[2 * PER_ROUND];
        MPI_Waitall(2 * PER_ROUND, req, st);
        sent += PER_ROUND;
        for (int i = 0; i < PER_ROUND; i++) {
            int want = size_of(round, i, partner), got = -1;
            MPI_Get_count(&st[i], MPI_BYTE, &got);
            int ok = got == want;
            for (long j = 0; ok && j < got; j++)
                ok = rbuf[i][j] == byte_of(round, i, partner, j, seed);
            if (ok)
                received++;
            else
                bad++;
        }
        double now = MPI_Wtime();
        if (now - last_report >= 1.0) {
            last_report = now;
            printf("stress rank %d at %.0f s: sent %lld received %lld bad %lld\n", rank,
                   now - t0, sent, received, bad);
            fflush(stdout);
        }
        if (rank == 0)
            stop = now - t0 >= seconds;
        MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    printf("stress rank %d: sent %lld received %lld bad %lld\n", rank, sent, received, bad);
    fflush(stdout);
    for (int i = 0; i < PER_ROUND; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
    MPI_Finalize();
    return bad > 0;
}
