/*
 * tigon_bench_mpi: the seeds' MPI measurements in one program, for two ranks.
 *
 *   LogP (seed 002, Fig. 3)      RTT/2, g, o_s, o_r (L is computed by the driver)
 *   bandwidth (seed 002, Fig. 9) unidirectional, simultaneous bidirectional (ping-pong
 *                                bandwidth is size / (RTT/2), from the same loop as RTT/2)
 *   availability (seed 001, Fig. 9) polling factor sweep for 32 KiB and 1 MiB
 *   double buffering (seed 000, Fig. 7) producer/consumer with CTS, delay-loop rates
 *   EMP's loop (seed 003, Table 2, Fig. 6) Irecv x5, Isend x5, compute, Waitall
 *
 * Rank 0 does all timing and prints one JSON object per line on stdout; `tigon bench mpi`
 * parses them, builds histograms and prints the tables. Rank 0 decides iteration counts from
 * a short pilot run and broadcasts them, so a slow transport gets fewer iterations instead
 * of a longer run.
 *
 * usage: tigon_bench_mpi [--quick] [--sizes N,N,...] [--tests logp,bw,avail,dbuf,emp]
 *                        [--budget-ms MS]
 *
 * Files: main.c (arguments, buffers, the run), common.c (clocks, calibrated work, planning,
 * JSON output), one file per measurement (logp.c, bandwidth.c, availability.c, dbuf.c,
 * emp.c), bench.h (what they share).
 */
#include "bench.h"

static int has_test(const char *tests, const char *name)
{
    if (!tests)
        return 1;
    size_t k = strlen(name);
    for (const char *p = tests; (p = strstr(p, name)); p += k)
        if ((p == tests || p[-1] == ',') && (p[k] == 0 || p[k] == ','))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int np;
    const char *tests = NULL, *sizes_arg = NULL;
    double budget_ms = -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--tests") && i + 1 < argc)
            tests = argv[++i];
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            sizes_arg = argv[++i];
        else if (!strcmp(argv[i], "--budget-ms") && i + 1 < argc)
            budget_ms = atof(argv[++i]);
        else {
            if (rank == 0)
                printf("{\"t\":\"error\",\"msg\":\"unknown argument %s\"}\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (np != 2) {
        if (rank == 0)
            printf("{\"t\":\"error\",\"msg\":\"needs exactly 2 ranks, got %d\"}\n", np);
        MPI_Finalize();
        return 2;
    }
    budget_ns = (budget_ms > 0 ? budget_ms : (quick ? 40 : 250)) * 1e6;
    nmax_samples = quick ? 5000 : 20000;

    int sizes[64], ns = 0;
    if (sizes_arg) {
        for (const char *p = sizes_arg; *p && ns < 64;) {
            sizes[ns++] = atoi(p);
            const char *c = strchr(p, ',');
            if (!c)
                break;
            p = c + 1;
        }
    } else if (quick) {
        static const int q[] = {0, 64, 1024, 16384, 65536, 1 << 20, 4 << 20};
        for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
            sizes[ns++] = q[i];
    } else {
        sizes[ns++] = 0;
        for (int s = 1; s <= (4 << 20); s *= 4)
            sizes[ns++] = s;
    }
    int maxsize = 0;
    for (int i = 0; i < ns; i++)
        if (sizes[i] > maxsize)
            maxsize = sizes[i];
    buf_cap = (size_t)16 << 20;
    if ((size_t)maxsize > buf_cap)
        buf_cap = (size_t)maxsize;
    sbuf = malloc(buf_cap);
    rbuf = malloc(buf_cap);
    samples = malloc(sizeof(long) * (size_t)nmax_samples * 4 + 64);
    samples2 = malloc(sizeof(long) * (size_t)nmax_samples + 64);
    if (!sbuf || !rbuf || !samples || !samples2)
        MPI_Abort(MPI_COMM_WORLD, 3);
    memset(sbuf, 1, buf_cap);
    memset(rbuf, 0, buf_cap);
    calibrate();
    ns_per_unit = agree_d(ns_per_unit);

    if (rank == 0) {
        char host[256] = "";
        MPI_Get_processor_name(host, &(int){0});
        out_begin("hello");
        out_long("np", np);
        out_long("quick", quick);
        out_num("budget_ns", budget_ns);
        printf(",\"ns_per_unit\":%.4f", ns_per_unit);
        out_str("host", host);
        out_end();
    }
    if (has_test(tests, "logp"))
        for (int i = 0; i < ns; i++)
            logp(sizes[i]);
    if (has_test(tests, "bw"))
        for (int i = 0; i < ns; i++)
            bandwidth(sizes[i]);
    if (has_test(tests, "avail"))
        availability();
    if (has_test(tests, "dbuf"))
        double_buffering();
    if (has_test(tests, "emp"))
        emp();
    if (rank == 0) {
        out_begin("done");
        out_end();
    }
    MPI_Finalize();
    return 0;
}
