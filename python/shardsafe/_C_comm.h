/* _C_comm.h -- shardsafe._C.Comm, a Python-callback communicator. */
#ifndef SHARDSAFE_PY_C_COMM_H
#define SHARDSAFE_PY_C_COMM_H

#include "_C.h"

typedef struct CommObject CommObject;

/* The shs_comm of a shardsafe._C.Comm (NULL + TypeError otherwise). */
shs_comm *pyshs_comm_get(PyObject *obj);
/* Copy (and clear) the text of the first failed op, "" when none. */
void pyshs_comm_take_error(PyObject *obj, char *out, size_t cap);
int pyshs_comm_init_type(PyObject *module);

#endif
