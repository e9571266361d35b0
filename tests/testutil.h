/* testutil.h -- helpers shared by the unit tests. */
#ifndef SHS_TESTUTIL_H
#define SHS_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "shardsafe.h"

/* A fresh empty directory under $TMPDIR (or /tmp); caller frees with
   tu_rmtree + free. */
char *tu_mkdtemp(void);
/* Remove a directory tree (best effort). */
void tu_rmtree(const char *path);
/* Write / read a whole file.  tu_read_file returns malloc'd data or NULL. */
int tu_write_file(const char *path, const void *data, size_t len);
void *tu_read_file(const char *path, size_t *len);
/* "<dir>/<name>" in a static rotating buffer (8 slots). */
const char *tu_path(const char *dir, const char *name);

/* Allocator that fails the N-th allocation (counting from 1) once armed. */
void tu_failalloc_install(void);
void tu_failalloc_arm(long fail_at);   /* 0 = never fail */
long tu_failalloc_count(void);          /* allocations since arm */
long tu_failalloc_live(void);           /* currently live allocations */
void tu_failalloc_uninstall(void);

#endif
