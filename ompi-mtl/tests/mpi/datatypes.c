/* Non-contiguous datatypes through Open MPI's convertor: vectors and structs, small and
   large, vector to contiguous and back, receives into strided memory. */
#include "common.h"

struct particle {
    double pos[3];
    char tag;
    int id;
    float mass;
};

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    int peer = rank == 0 ? 1 : 0;
    if (rank > 1) {
        ok("datatypes");
        MPI_Finalize();
        return 0;
    }
    /* Vectors: every other double of a matrix column, small (eager) and large (rendezvous). */
    int counts[] = {3, 1000, 300000};
    for (int k = 0; k < 3; k++) {
        int n = counts[k], stride = 3;
        MPI_Datatype vec;
        MPI_Type_vector(n, 2, stride, MPI_DOUBLE, &vec);
        MPI_Type_commit(&vec);
        double *a = xmalloc(sizeof(double) * (size_t) n * stride);
        double *c = xmalloc(sizeof(double) * (size_t) n * 2);
        if (rank == 0) {
            for (int i = 0; i < n * stride; i++) a[i] = i % stride == 2 ? -1.0 : i * 0.5 + k;
            MPI_OK(MPI_Send(a, 1, vec, peer, k, MPI_COMM_WORLD));          /* vector -> contiguous */
            MPI_OK(MPI_Recv(a, 1, vec, peer, 10 + k, MPI_COMM_WORLD, MPI_STATUS_IGNORE)); /* contiguous -> vector */
            for (int i = 0; i < n; i++) {
                CHECK(a[i * stride] == i * 7.0 && a[i * stride + 1] == i * 7.0 + 1, "vector element %d", i);
                CHECK(a[i * stride + 2] == -1.0, "gap %d overwritten", i);
            }
        } else {
            MPI_Status s;
            MPI_OK(MPI_Recv(c, 2 * n, MPI_DOUBLE, peer, k, MPI_COMM_WORLD, &s));
            int cnt;
            MPI_Get_count(&s, MPI_DOUBLE, &cnt);
            CHECK(cnt == 2 * n, "count %d", cnt);
            for (int i = 0; i < n; i++)
                CHECK(c[2 * i] == (i * stride) * 0.5 + k && c[2 * i + 1] == (i * stride + 1) * 0.5 + k, "packed element %d", i);
            for (int i = 0; i < n; i++) {
                c[2 * i] = i * 7.0;
                c[2 * i + 1] = i * 7.0 + 1;
            }
            MPI_OK(MPI_Send(c, 2 * n, MPI_DOUBLE, peer, 10 + k, MPI_COMM_WORLD));
        }
        /* vector -> vector, nonblocking, both directions. */
        double *b = xmalloc(sizeof(double) * (size_t) n * stride);
        for (int i = 0; i < n * stride; i++) {
            a[i] = rank * 1e6 + i;
            b[i] = -5;
        }
        MPI_Request r[2];
        MPI_OK(MPI_Irecv(b, 1, vec, peer, 20 + k, MPI_COMM_WORLD, &r[0]));
        MPI_OK(MPI_Isend(a, 1, vec, peer, 20 + k, MPI_COMM_WORLD, &r[1]));
        MPI_OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        for (int i = 0; i < n * stride; i++) {
            double want = i % stride == 2 ? -5 : peer * 1e6 + i;
            CHECK(b[i] == want, "vector<->vector element %d: %g", i, b[i]);
        }
        MPI_Type_free(&vec);
        free(a);
        free(b);
        free(c);
    }
    /* Structs with padding, an array of them, resized to the C struct's extent. */
    {
        MPI_Datatype tmp, ptype;
        int bl[4] = {3, 1, 1, 1};
        MPI_Aint disp[4] = {offsetof(struct particle, pos), offsetof(struct particle, tag),
                            offsetof(struct particle, id), offsetof(struct particle, mass)};
        MPI_Datatype types[4] = {MPI_DOUBLE, MPI_CHAR, MPI_INT, MPI_FLOAT};
        MPI_Type_create_struct(4, bl, disp, types, &tmp);
        MPI_Type_create_resized(tmp, 0, sizeof(struct particle), &ptype);
        MPI_Type_commit(&ptype);
        for (int n = 1; n <= 100000; n *= 100) {
            struct particle *p = xmalloc(sizeof *p * (size_t) n);
            if (rank == 0) {
                for (int i = 0; i < n; i++) {
                    p[i].pos[0] = i;
                    p[i].pos[1] = -i;
                    p[i].pos[2] = i * 0.25;
                    p[i].tag = (char) ('a' + i % 26);
                    p[i].id = i * 3;
                    p[i].mass = (float) i / 2;
                }
                MPI_OK(MPI_Send(p, n, ptype, peer, 40, MPI_COMM_WORLD));
            } else {
                memset(p, 0, sizeof *p * (size_t) n);
                MPI_Status s;
                MPI_OK(MPI_Recv(p, n, ptype, peer, 40, MPI_COMM_WORLD, &s));
                int cnt;
                MPI_Get_count(&s, ptype, &cnt);
                CHECK(cnt == n, "struct count %d of %d", cnt, n);
                for (int i = 0; i < n; i++)
                    CHECK(p[i].pos[0] == i && p[i].pos[1] == -i && p[i].pos[2] == i * 0.25 &&
                              p[i].tag == (char) ('a' + i % 26) && p[i].id == i * 3 && p[i].mass == (float) i / 2,
                          "particle %d of %d", i, n);
            }
            free(p);
        }
        MPI_Type_free(&ptype);
        MPI_Type_free(&tmp);
    }
    /* Indexed type; receive into a smaller vector: truncation through the convertor. */
    {
        int blens[3] = {2, 1, 4}, displs[3] = {0, 5, 9};
        MPI_Datatype idx;
        MPI_Type_indexed(3, blens, displs, MPI_INT, &idx);
        MPI_Type_commit(&idx);
        int buf[16];
        if (rank == 0) {
            for (int i = 0; i < 16; i++) buf[i] = 100 + i;
            MPI_OK(MPI_Send(buf, 1, idx, peer, 50, MPI_COMM_WORLD));
        } else {
            int got[7];
            MPI_OK(MPI_Recv(got, 7, MPI_INT, peer, 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            int want[7] = {100, 101, 105, 109, 110, 111, 112};
            for (int i = 0; i < 7; i++) CHECK(got[i] == want[i], "indexed element %d: %d", i, got[i]);
        }
        MPI_Type_free(&idx);
    }
    ok("datatypes");
    MPI_Finalize();
    return 0;
}
