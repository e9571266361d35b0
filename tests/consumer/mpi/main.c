/* Every rank saves its row of a [ranks, 4] tensor through the installed
   libshardsafe_mpi, then loads it back. */
#include <shardsafe_mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    shs_comm *comm;
    if (shs_comm_create_mpi(&comm, MPI_COMM_WORLD) != SHS_OK)
        return 1;
    int rank = shs_comm_rank(comm), size = shs_comm_size(comm);
    float row[4] = { (float)rank, 1, 2, 3 }, back[4] = { 0 };
    uint64_t shape[2] = { 1, 4 }, gshape[2] = { (uint64_t)size, 4 }, off[2] = { (uint64_t)rank, 0 };
    shs_state *st;
    shs_state_create(&st);
    shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
    s.name = "x";
    s.ndim = 2;
    s.shape = shape;
    s.global_shape = gshape;
    s.global_offset = off;
    s.data = row;
    shs_state_add_tensor(st, &s);
    shs_config cfg;
    shs_config_init(&cfg);
    cfg.save_path = argc > 1 ? argv[1] : "mpi-consumer-ckpt";
    shs_manager *m;
    shs_progress p = SHS_PROGRESS_INIT;
    p.global_step = 1;
    int rc = shs_manager_create_comm(&m, &cfg, st, comm);
    if (rc == SHS_OK)
        rc = shs_manager_save(m, &p, 0);
    shs_manager_free(m);
    shs_state_free(st);
    if (rc == SHS_OK) {
        shs_state_create(&st);
        s.data = back;
        shs_state_add_tensor(st, &s);
        rc = shs_manager_create_comm(&m, &cfg, st, comm);
        if (rc == SHS_OK)
            rc = shs_manager_load(NULL, m, &p);
        shs_manager_free(m);
        shs_state_free(st);
    }
    if (rc != SHS_OK || memcmp(row, back, sizeof row) != 0)
        fprintf(stderr, "rank %d: %s\n", rank, rc ? shs_last_error() : "values differ");
    else if (rank == 0)
        printf("mpi consumer ok on %d ranks\n", size);
    shs_comm_free(comm);
    MPI_Finalize();
    return rc != SHS_OK;
}
