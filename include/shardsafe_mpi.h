/*
 * shardsafe_mpi.h -- the MPI backend of the communication seam, in its own
 * library (libshardsafe_mpi) so that libshardsafe never links MPI.
 */
#ifndef SHARDSAFE_MPI_H
#define SHARDSAFE_MPI_H

#include <mpi.h>

#include "shardsafe.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A communicator over a duplicate of `comm` (MPI_COMM_WORLD, or the
 * caller's), so shardsafe's messages never mix with the caller's.  MPI must
 * be initialised; with async_save on several ranks, initialise it with
 * MPI_THREAD_MULTIPLE (the background save calls collectives from its own
 * thread).  Collective: every rank of `comm` calls it.  Free it with
 * shs_comm_free() before MPI_Finalize().
 */
SHS_API int shs_comm_create_mpi(shs_comm **out, MPI_Comm comm);

#ifdef __cplusplus
}
#endif
#endif
