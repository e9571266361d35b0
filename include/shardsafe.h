/*
 * shardsafe.h -- the public API of libshardsafe.
 *
 * shardsafe stores training checkpoints as safetensors files.  This header
 * is the whole API and its documentation; anything not declared here is
 * private to the library.
 *
 * Conventions
 *   - Every fallible function returns an `int` status: SHS_OK (0) or one of
 *     the negative `shs_status` values.  Out-parameters come first.
 *   - After a failure, shs_last_error() returns a message for the calling
 *     thread that names the file and the problem ("model.safetensors:
 *     tensor 'w': data_offsets [0, 12] do not match shape [4] x F32 (16
 *     bytes)").  The message stays valid until the next call into the
 *     library from the same thread.
 *   - Handles are opaque; every destroy function accepts NULL.
 *   - Versioned structs (options, and the results the library fills:
 *     shs_load_result, shs_save_stats, shs_chunk_info, shs_progress ...)
 *     start with `unsigned version`; initialise them with their `*_INIT`
 *     macro (or init function) so that it holds the version of the header
 *     the caller was compiled with.  Versioning follows the libgit2 model:
 *     new fields are only ever appended, and each append bumps the
 *     struct's *_VERSION.  Every entry point checks `version` first and
 *     accepts any version from 1 up to its own; it then READS an option
 *     struct only as far as the caller's version goes (later fields take
 *     their defaults) and WRITES a result struct only as far as the
 *     caller's version goes (its `version` stays the caller's), so a
 *     program built against an older header keeps working with a newer
 *     library and never has memory past its struct touched
 *     (tests/test_abi.c holds the library to this).  A version newer than
 *     the library's and version 0 (a struct never initialised) are
 *     SHS_EINVAL: "shs_file_open: shs_open_opts version 3 (this library
 *     knows 1 to 1): initialise it with SHS_OPEN_OPTS_INIT".
  - Thread safety: distinct handles may be used from distinct threads at
 *     once.  A reader handle (shs_file) is immutable after open and may be
 *     read from many threads at once.  A writer handle is single-threaded.
 *     shs_set_allocator() must be called before any other function.

 * Stability tiers (as zstd.h marks its own)
 *   STABLE        the sections under "Stable API": kept source- and
 *                 binary-compatible across minor releases (structs grow
 *                 only by appended, versioned fields; nothing is renamed
 *                 or removed before 1.0 without a release note).
 *   ADVANCED      save-path internals and the offline tools, for tools and
 *                 bindings: stable in behaviour, may gain arguments in
 *                 the 0.x series (each such change is listed in the
 *                 release notes).
 *   EXPERIMENTAL  marked so where declared: may change in any release.
 *
 * Naming: functions are shs_<object>_<verb> (shs_checkpoint_open), types
 * shs_<object>[_<what>] (shs_checkpoint_open_opts), constants
 * SHS_<OBJECT>_<NAME>; every handle is released by shs_<object>_free,
 * and out-parameters (results included) come first.
 */
#ifndef SHARDSAFE_H
#define SHARDSAFE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SHS_BUILDING_LIBRARY) && defined(__GNUC__)
#define SHS_API __attribute__((visibility("default")))
#else
#define SHS_API
#endif

#define SHS_VERSION_MAJOR 0
#define SHS_VERSION_MINOR 1
#define SHS_VERSION_PATCH 0
#define SHS_VERSION_STRING "0.1.0"
/* The version as one number, major * 10000 + minor * 100 + patch. */
#define SHS_VERSION_NUMBER (SHS_VERSION_MAJOR * 10000 + SHS_VERSION_MINOR * 100 + SHS_VERSION_PATCH)

/* Version of the library loaded at run time, which may differ from the
   header's SHS_VERSION_* that a program was compiled with: as a string,
   e.g. "0.1.0", and as a number (SHS_VERSION_NUMBER's formula, e.g. 100),
   to compare, e.g. shs_version_number() >= 200 for 0.2.0 or later. */
SHS_API const char *shs_version(void);
SHS_API unsigned shs_version_number(void);

/* ========================================================================
 * STABLE API
 * ===================================================================== */

/* ------------------------------------------------------------------------
 * Status codes.  Values are stable; new codes are only ever appended.
 * The safetensors format codes are listed in the order in which the reader
 * checks a file (the order of the reference implementation).
 * ---------------------------------------------------------------------- */
typedef enum shs_status {
    SHS_OK = 0,
    SHS_ENOMEM = -1,       /* an allocation failed */
    SHS_EIO = -2,          /* a read/write/fsync/rename failed */
    SHS_EINVAL = -3,       /* invalid argument from the caller */
    SHS_ENOENT = -4,       /* file or directory does not exist */
    SHS_ENOTFOUND = -5,    /* no tensor / key of that name */
    SHS_ERANGE = -6,       /* slice or buffer outside the tensor */
    SHS_ENOSPC = -7,       /* no space left on the device */
    SHS_ESTATE = -8,       /* call not valid in the handle's state */
    SHS_EUNSUPPORTED = -9, /* valid request the library cannot do */

    /* safetensors format, in checking order */
    SHS_EHEADER_TOO_SMALL = -20, /* file shorter than 8 bytes */
    SHS_EHEADER_TOO_LARGE = -21, /* header length > 100,000,000 */
    SHS_EHEADER_LENGTH = -22,    /* header extends past end of file */
    SHS_EUTF8 = -23,             /* header is not valid UTF-8 */
    SHS_EJSON = -24,             /* header is not strict JSON */
    SHS_ENESTING = -25,          /* JSON nested 128 or more levels deep
                                      (serde_json's recursion limit) */
    SHS_ESCHEMA = -26,           /* JSON valid, but not a safetensors header
                                      (wrong type, missing field, bad number) */
    SHS_EDTYPE = -27,            /* unknown dtype string */
    SHS_EDUPLICATE = -28,        /* duplicate key in the header */
    SHS_EOFFSET = -29,           /* data_offsets not contiguous from 0 */
    SHS_EOVERFLOW = -30,         /* numel x bits overflows 64 bits */
    SHS_EMISALIGNED = -31,       /* numel x bits not a whole number of bytes */
    SHS_ETENSOR_SIZE = -32,      /* byte range != numel x dtype size */
    SHS_ETRAILING = -33,         /* data does not end exactly at end of file */
    SHS_EWRONG_FORMAT = -34,     /* recognisably another format (git-LFS
                                      pointer, pickle, zip, HDF5, GGUF) */
    SHS_ECONVERT = -35,          /* dtype conversion not supported */

    /* checkpoints */
    SHS_ECONFIG = -50,       /* invalid configuration (names the field) */
    SHS_ECHECKSUM = -51,     /* stored data does not match its checksum */
    SHS_ECORRUPT = -52,      /* checkpoint files inconsistent / malformed */
    SHS_EMISMATCH = -53,     /* checkpoint does not match the registered
                                      state (missing, extra, mis-shaped) */
    SHS_ENOCHECKPOINT = -54, /* no checkpoint where one was required */
    SHS_ELOCKED = -55,       /* the save path is locked by another
                                      writer (shs_savepath_lock) */
    SHS_EKEY = -60,          /* a key that is missing, wrong or malformed
                                      (encryption at rest; the message says
                                      "key required", "wrong key", or names
                                      the key file or variable at fault) */
    SHS_EEXIST = -61         /* a create-only write (an S3 PUT with
                                      If-None-Match: *, a local link(2))
                                      found the name taken: a step committed
                                      by another attempt, a lease another
                                      job holds (docs/s3.md) */
} shs_status;

/* Static description of a status code ("header is not valid UTF-8"). */
SHS_API const char *shs_strerror(int status);

/* Detailed message of the calling thread's most recent failure, or "" . */
SHS_API const char *shs_last_error(void);

/* ------------------------------------------------------------------------
 * Allocator hook.  Every allocation the library's own code makes goes
 * through these, and so do jansson's (it builds the JSON the library
 * writes).  NOT covered: what the other libraries allocate on their own --
 * libyaml while parsing a YAML config, OpenSSL's cipher and digest
 * contexts (encryption at rest), libcurl (object storage) and the C
 * library (threads, locale, stdio).  Call before any other function;
 * pass NULL to restore malloc/realloc/free.
 * ---------------------------------------------------------------------- */
typedef struct shs_allocator {
    void *(*malloc_fn)(void *ctx, size_t size);
    void *(*realloc_fn)(void *ctx, void *ptr, size_t size);
    void (*free_fn)(void *ctx, void *ptr);
    void *ctx;
} shs_allocator;

SHS_API void shs_set_allocator(const shs_allocator *allocator);

/* Release memory the library allocated and handed to the caller (the
   layout documents of shs_reshard_saved_layout and shs_strategy_layout);
   through the allocator set above.  NULL is a no-op. */
SHS_API void shs_free(void *ptr);

/* ------------------------------------------------------------------------
 * Data types.  Values follow the reference implementation's ordering
 * (ascending alignment); the writer sorts tensors by descending dtype.
 * ---------------------------------------------------------------------- */
typedef enum shs_dtype {
    SHS_DTYPE_NONE = -1, /* no dtype: "keep what is stored" where an option
                            takes one (shs_merge_opts.dtype) */
    SHS_BOOL = 0,
    SHS_F4,
    SHS_F6_E2M3,
    SHS_F6_E3M2,
    SHS_U8,
    SHS_I8,
    SHS_F8_E5M2,
    SHS_F8_E4M3,
    SHS_F8_E8M0,
    SHS_F8_E4M3FNUZ,
    SHS_F8_E5M2FNUZ,
    SHS_I16,
    SHS_U16,
    SHS_F16,
    SHS_BF16,
    SHS_I32,
    SHS_U32,
    SHS_F32,
    SHS_C64,
    SHS_F64,
    SHS_I64,
    SHS_U64,
    SHS_DTYPE_COUNT
} shs_dtype;

/* "F32", "BF16", ... or NULL for a value out of range. */
SHS_API const char *shs_dtype_name(shs_dtype dtype);
/* Parse a dtype name (case-sensitive, as in files).  `len` bytes of `name`. */
SHS_API int shs_dtype_parse(shs_dtype *out, const char *name, size_t len);
/* Bits per element: 4 (F4), 6 (F6_*), 8, 16, 32 or 64; 0 if out of range. */
SHS_API unsigned shs_dtype_bits(shs_dtype dtype);
/* 1 for the floating-point types shs_convert converts between (F64, F32,
   F16, BF16 and the F8 kinds), else 0.  F4 and F6_* are stored and
   copied, not converted. */
SHS_API int shs_dtype_is_float(shs_dtype dtype);

/*
 * Convert `n` elements from `src` (of type `src_type`) to `dst` (of type
 * `dst_type`).  Supported: any pair among F64, F32, F16, BF16, F8_E4M3,
 * F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0, and identical types (a copy,
 * for any dtype).  Narrowing rounds once, to nearest, ties to even (F64 is
 * never rounded through F32).  NaN stays NaN.  Infinity and overflow give
 * infinity in F16, BF16 and F8_E5M2; the formats without infinity
 * (F8_E4M3, the FNUZ kinds, F8_E8M0) saturate to their largest finite
 * value of the same sign ("satfinite").  The FNUZ kinds have no -0 (it
 * becomes +0).  F8_E8M0 (unsigned powers of two) rounds to the nearest
 * power of two, maps zero and tiny values to 2^-127, and negative values
 * to NaN.  Buffers need no alignment and must not overlap.  Returns
 * SHS_ECONVERT for an unsupported pair.
 */
SHS_API int shs_convert(void *dst, shs_dtype dst_type, const void *src, shs_dtype src_type,
                        size_t n);

/* Scalar helpers for the common cases (round to nearest even). */
SHS_API uint16_t shs_f32_to_bf16(float x);
SHS_API float shs_bf16_to_f32(uint16_t x);
SHS_API uint16_t shs_f32_to_f16(float x);
SHS_API float shs_f16_to_f32(uint16_t x);

/* A dtype by its safetensors name or a framework's alias, any case:
   BF16/bfloat16, F16/fp16/float16/half, F32/fp32/float32/float,
   F64/fp64/float64/double, F8_E4M3/float8_e4m3fn, F8_E5M2/float8_e5m2.
   SHS_EDTYPE naming the text otherwise.  (The `export_dtype` key and the
   CLI's --dtype.) */
SHS_API int shs_dtype_parse_alias(shs_dtype *out, const char *name);

/* ------------------------------------------------------------------------
 * Reading safetensors files.
 *
 * shs_file_open() validates the whole header with every rule of the
 * reference implementation, in its order, plus one more: a duplicate key
 * anywhere in the header is an error.  Opening costs O(header): tensor data
 * is mapped (mmap) but not touched.  Where mmap is unavailable, or with
 * SHS_OPEN_NO_MMAP, data is read with pread on demand.
 * ---------------------------------------------------------------------- */
typedef struct shs_file shs_file;

#define SHS_MAX_DIMS 64 /* more dimensions than this: SHS_ESCHEMA */

enum {
    SHS_OPEN_NO_MMAP = 1u << 0, /* never mmap; read with pread */
    /* refuse a symbolic link as the file itself (O_NOFOLLOW): the error
       says "is a symbolic link".  Checkpoint readers use it for the files
       of a step directory, so that a link never makes them read bytes
       from outside it. */
    SHS_OPEN_NO_FOLLOW = 1u << 1,
    /* map the data private and writable (MAP_PRIVATE with PROT_READ |
       PROT_WRITE, copy-on-write): the bytes shs_file_tensor_data points
       to may then be written through a cast.  A write copies the page for
       this handle only: the file, other processes and other handles never
       see it; later reads through this handle (shs_file_read, _read_slice,
       _read_bytes) do.  For bindings whose arrays cannot be read-only
       (torch tensors).  Such a mapping is charged in full to the commit
       limit (vm.overcommit_memory=2); where it cannot be made, the file
       is simply not mapped (shs_file_tensor_data returns NULL and reads
       use pread), as when mmap is unavailable.  No effect with
       SHS_OPEN_NO_MMAP. */
    SHS_OPEN_PRIVATE_WRITABLE = 1u << 2
};

typedef struct shs_open_opts {
    unsigned version; /* SHS_OPEN_OPTS_VERSION */
    unsigned flags;   /* SHS_OPEN_* */
} shs_open_opts;
#define SHS_OPEN_OPTS_VERSION 1
#define SHS_OPEN_OPTS_INIT                                                                         \
    {                                                                                              \
        SHS_OPEN_OPTS_VERSION, 0                                                                   \
    }

/* Description of one tensor.  Pointers stay valid while the file is open. */
typedef struct shs_tensor_info {
    const char *name; /* NUL-terminated (a name may hold "\u0000":
                                then use name_len) */
    size_t name_len;
    shs_dtype dtype;
    size_t ndim;
    const uint64_t *shape; /* ndim entries */
    uint64_t numel;
    uint64_t offset; /* byte offset from the start of the data */
    uint64_t nbytes;
} shs_tensor_info;

/* Open and validate `path`.  `opts` may be NULL.  On failure *out is NULL. */
SHS_API int shs_file_open(shs_file **out, const char *path, const shs_open_opts *opts);

/*
 * Validate an in-memory file image of `len` bytes.  The buffer is not copied
 * and must outlive the handle.  `name` is used in messages (may be NULL).
 */
SHS_API int shs_file_open_memory(shs_file **out, const void *data, size_t len, const char *name);

SHS_API void shs_file_free(shs_file *file);

/* Path (or name) the file was opened with. */
SHS_API const char *shs_file_path(const shs_file *file);
/* Total file size, header length (the 8-byte prefix's value), and the byte
   offset in the file where tensor data starts (8 + header length). */
SHS_API uint64_t shs_file_size(const shs_file *file);
SHS_API uint64_t shs_file_header_len(const shs_file *file);
SHS_API uint64_t shs_file_data_start(const shs_file *file);
/* Raw header JSON (not NUL-terminated; length shs_file_header_len). */
SHS_API const char *shs_file_header(const shs_file *file);

/* Tensors, in the order of their data in the file. */
SHS_API size_t shs_file_tensor_count(const shs_file *file);
SHS_API const shs_tensor_info *shs_file_tensor(const shs_file *file, size_t index);
/* Find a tensor by (NUL-terminated) name; SHS_ENOTFOUND if absent. */
SHS_API int shs_file_find(size_t *out_index, const shs_file *file, const char *name);
/* The same for a name of `len` bytes (which may contain NUL). */
SHS_API int shs_file_find_n(size_t *out_index, const shs_file *file, const char *name, size_t len);

/* `__metadata__` entries, sorted by key (bytewise, over the full key).
   has_metadata is 0 when the header had no `__metadata__` (or null), 1
   when present (possibly empty).  Keys and values are decoded UTF-8, owned
   by the file, valid until shs_file_free, and NUL-terminated -- but JSON
   lets them hold "\u0000", so a key or value may also contain NUL bytes:
   the _n accessors give their full lengths, the others read them as C
   strings (cut at the first NUL). */
SHS_API int shs_file_has_metadata(const shs_file *file);
SHS_API size_t shs_file_metadata_count(const shs_file *file);
/* Entry `index` (< metadata_count), SHS_ERANGE otherwise. */
SHS_API int shs_file_metadata_at(const char **out_key, const char **out_value, const shs_file *file,
                                 size_t index);
/* The same with the byte lengths of key and value (NUL bytes included). */
SHS_API int shs_file_metadata_at_n(const char **out_key, size_t *out_key_len,
                                   const char **out_value, size_t *out_value_len,
                                   const shs_file *file, size_t index);
/* Value for the C-string `key`, or NULL. */
SHS_API const char *shs_file_metadata_get(const shs_file *file, const char *key);
/* Value for the `key_len`-byte key (which may contain NUL), or NULL; its
   length goes to *out_value_len when that is not NULL. */
SHS_API const char *shs_file_metadata_get_n(const shs_file *file, const char *key, size_t key_len,
                                            size_t *out_value_len);

/*
 * Zero-copy pointer to a tensor's bytes (no alignment guarantee), or NULL
 * when the file is not mapped (SHS_OPEN_NO_MMAP or mmap unavailable) or is
 * a data file of an encrypted save (its __metadata__ holds
 * "shardsafe_cipher": its tensors are ciphertext, which the reads below
 * refuse with SHS_EKEY too; read it through its checkpoint with the key).
 * Read-only, unless the file was opened with SHS_OPEN_PRIVATE_WRITABLE.
 * As with any mapping, if another process truncates the file while it is
 * open, touching the lost pages raises SIGBUS; pages touched count in the
 * process's RSS.  Use SHS_OPEN_NO_MMAP for files that may change.
 */
SHS_API const void *shs_file_tensor_data(const shs_file *file, size_t index);

/* Copy the whole tensor into `dst` (dst_len >= nbytes, else SHS_ERANGE). */
SHS_API int shs_file_read(const shs_file *file, size_t index, void *dst, size_t dst_len);

/*
 * Copy the sub-box [start[d], start[d] + count[d]) of a tensor into `dst`,
 * row-major and dense.  Reads only the bytes of that box.  Sub-byte dtypes
 * (F4, F6_*) require whole bytes per innermost row.  Errors: SHS_ERANGE for
 * a box outside the tensor or dst_len too small.
 */
SHS_API int shs_file_read_slice(const shs_file *file, size_t index, const uint64_t *start,
                                const uint64_t *count, void *dst, size_t dst_len);

/*
 * Read `len` bytes at byte `offset` of a tensor's data into `dst`.
 * For streaming large tensors in bounded memory.
 */
SHS_API int shs_file_read_bytes(const shs_file *file, size_t index, uint64_t offset, void *dst,
                                size_t len);

/* ------------------------------------------------------------------------
 * Writing safetensors files.
 *
 * The writer streams: declare every tensor (name, dtype, shape) and the
 * metadata first; the header is then fixed and tensor bytes are written one
 * tensor, or one piece of a tensor, at a time in any order.  Output is
 * byte-identical to the reference writer: tensors sorted by descending
 * dtype then name, compact JSON with `__metadata__` first (keys sorted),
 * header padded with spaces to a multiple of 8 (or of `align`).
 *
 * Data goes to "<path>.tmp.<random>" in the same directory; commit
 * checks every byte was written, optionally fsyncs, renames it over
 * `path` and fsyncs the directory.  Destroying an uncommitted writer
 * removes the temporary file: `path` is never left half-written.
 * ---------------------------------------------------------------------- */
typedef struct shs_writer shs_writer;

typedef struct shs_writer_opts {
    unsigned version; /* SHS_WRITER_OPTS_VERSION */
    int fsync;        /* nonzero: fsync file and directory on commit */
    uint32_t align;   /* data start aligned to this many bytes: 0 or 8 =
                           reference (8); e.g. 4096 for page alignment.
                           Must be a power of two. */
} shs_writer_opts;
#define SHS_WRITER_OPTS_VERSION 1
#define SHS_WRITER_OPTS_INIT                                                                       \
    {                                                                                              \
        SHS_WRITER_OPTS_VERSION, 0, 0                                                              \
    }

SHS_API int shs_writer_create(shs_writer **out, const char *path, const shs_writer_opts *opts);

/* Declare a `__metadata__` entry.  Any call (even none) with has_metadata
   semantics: the header gets `__metadata__` iff at least one entry was added
   or shs_writer_set_metadata_present() was called. */
SHS_API int shs_writer_add_metadata(shs_writer *w, const char *key, const char *value);
/* The same with explicit lengths: key and value may contain NUL bytes
   (written as "\u0000"); they must be valid UTF-8.  Keys are unique over
   their full bytes (SHS_EDUPLICATE). */
SHS_API int shs_writer_add_metadata_n(shs_writer *w, const char *key, size_t key_len,
                                      const char *value, size_t value_len);
SHS_API int shs_writer_set_metadata_present(shs_writer *w);

/* Declare a tensor.  Names must be unique, valid UTF-8 and not
   "__metadata__"; SHS_EDUPLICATE / SHS_EINVAL otherwise. */
SHS_API int shs_writer_add_tensor(shs_writer *w, const char *name, shs_dtype dtype, size_t ndim,
                                  const uint64_t *shape);

/* Fix the header and write it.  Called implicitly by the first write. */
SHS_API int shs_writer_seal(shs_writer *w);

/* Order in which tensors are laid out (for writing sequentially).  Valid
   after seal; `index` in 0..count-1; returns the tensor's name. */
SHS_API const char *shs_writer_tensor_name(const shs_writer *w, size_t index);
SHS_API size_t shs_writer_tensor_count(const shs_writer *w);

/* Write a whole tensor (len must equal its byte size). */
SHS_API int shs_writer_write(shs_writer *w, const char *name, const void *data, size_t len);
/* Write `len` bytes at byte `offset` within the tensor's data. */
SHS_API int shs_writer_write_part(shs_writer *w, const char *name, uint64_t offset,
                                  const void *data, size_t len);

/* Finish: check completeness, (fsync), rename into place, (fsync dir). */
SHS_API int shs_writer_commit(shs_writer *w);

/* Free the writer; if not committed, remove the temporary file. */
SHS_API void shs_writer_free(shs_writer *w);

/* One tensor for shs_save_file(). */
typedef struct shs_tensor_view {
    const char *name;
    shs_dtype dtype;
    size_t ndim;
    const uint64_t *shape;
    const void *data; /* numel x dtype bytes */
} shs_tensor_view;

/* Write a complete file in one call.  `metadata` holds n_metadata
   (key, value) pairs as 2*n_metadata strings; NULL for no `__metadata__`. */
SHS_API int shs_save_file(const char *path, const shs_tensor_view *tensors, size_t n_tensors,
                          const char *const *metadata, size_t n_metadata,
                          const shs_writer_opts *opts);

/* Byte size of a tensor of `shape`: SHS_EOVERFLOW on overflow,
   SHS_EMISALIGNED when sub-byte elements do not fill whole bytes. */
SHS_API int shs_tensor_nbytes(uint64_t *out, shs_dtype dtype, size_t ndim, const uint64_t *shape);

/* ------------------------------------------------------------------------
 * Training state.
 *
 * A caller registers what a checkpoint holds: named tensors (model weights,
 * optimizer state) whose memory stays the caller's, and small named blobs
 * of bytes (lr_scheduler, dataloader, rng, train_state: JSON text or
 * binary).  Saving reads the registered memory; loading writes into it.
 * A tensor may be the whole tensor or this process's chunk of a global
 * tensor (global shape + offset of the chunk), so the same registration
 * serves single-process and distributed runs.
 * ---------------------------------------------------------------------- */
typedef struct shs_state shs_state;

typedef enum shs_kind {
    SHS_KIND_MODEL = 0,    /* saved in {prefix}-model-*.safetensors */
    SHS_KIND_OPTIMIZER = 1 /* saved in {prefix}-opt-*.safetensors */
} shs_kind;

typedef struct shs_tensor_spec {
    unsigned version; /* SHS_TENSOR_SPEC_VERSION */
    const char *name; /* full name, unique in the state */
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    const uint64_t *shape;         /* shape of `data` (the local chunk) */
    const uint64_t *global_shape;  /* NULL: the chunk is the whole tensor */
    const uint64_t *global_offset; /* NULL: all zeros */
    void *data;                    /* caller's memory, dense row-major */
    /* For an optimizer tensor that is the fp32 master copy of a model
       tensor: that tensor's name.  Loading with no_load_optim refreshes it
       from the loaded model weights (converting the dtype).  Else NULL. */
    const char *master_of;
} shs_tensor_spec;
#define SHS_TENSOR_SPEC_VERSION 1
#define SHS_TENSOR_SPEC_INIT                                                                       \
    {                                                                                              \
        SHS_TENSOR_SPEC_VERSION, NULL, SHS_KIND_MODEL, SHS_F32, 0, NULL, NULL, NULL, NULL, NULL    \
    }

SHS_API int shs_state_create(shs_state **out);
SHS_API void shs_state_free(shs_state *state);
/* Register a tensor.  The spec's strings and arrays are copied; `data`
   is kept and must stay valid while the state is used.  A tensor with
   zero elements (e.g. an empty optimizer slot) is valid. */
SHS_API int shs_state_add_tensor(shs_state *state, const shs_tensor_spec *spec);
/* Set a blob (copied).  Blobs are per process ("rank-local"). */
SHS_API int shs_state_set_blob(shs_state *state, const char *name, const void *data, size_t len);
/* A blob's current value (set by the caller or by the last load);
   SHS_ENOTFOUND when absent.  The pointer is valid until the blob
   changes. */
SHS_API int shs_state_get_blob(const shs_state *state, const char *name, const void **data,
                               size_t *len);
SHS_API size_t shs_state_tensor_count(const shs_state *state);
/* Total bytes of the registered tensors. */
SHS_API uint64_t shs_state_nbytes(const shs_state *state);

/* Training progress, stored as common.json (exactly these seven keys).
   Initialise with SHS_PROGRESS_INIT: every function that takes one checks
   `version` (1 up to SHS_PROGRESS_VERSION) and reads or fills only the
   fields of that version. */
typedef struct shs_progress {
    unsigned version; /* SHS_PROGRESS_VERSION */
    int64_t epoch_num;
    int64_t step_num; /* step within the epoch */
    int64_t global_step;
    double loss_scale;
    int64_t global_batch_size;
    int64_t consumed_samples;
    char ckpt_status[32]; /* "" is written as null; NUL-terminated (a
                             longer status in common.json is an error,
                             never truncated) */
} shs_progress;
#define SHS_PROGRESS_VERSION 1u
#define SHS_PROGRESS_INIT                                                                          \
    {                                                                                              \
        SHS_PROGRESS_VERSION, 0, 0, 0, 0.0, 0, 0, ""                                               \
    }

/* ------------------------------------------------------------------------
 * Communication between the processes (ranks) of a job.
 *
 * The library needs a handful of collectives; they come from a backend
 * behind this seam.  The default is a single process.  The MPI backend is
 * in its own library, libshardsafe_mpi (header shardsafe_mpi.h), so this
 * library never links MPI.  Other backends can be plugged in with
 * shs_comm_create().  Every rank must make the same collective calls in
 * the same order.  A backend op returns 0 or a negative shs_status.
 * ---------------------------------------------------------------------- */
typedef struct shs_comm shs_comm;

typedef struct shs_comm_ops {
    unsigned version; /* SHS_COMM_OPS_VERSION */
    int (*barrier)(void *ctx);
    int (*broadcast)(void *ctx, void *buf, size_t len, int root);
    /* Every rank sends `len` bytes; every rank receives size * len bytes,
       rank i's at recv + i * len. */
    int (*allgather)(void *ctx, const void *send, size_t len, void *recv);
    /* Rank i sends lens[i] bytes (every rank knows all lens); `root`
       receives them concatenated in rank order into recv (others pass
       NULL). */
    int (*gatherv)(void *ctx, const void *send, const size_t *lens, void *recv, int root);
    int (*send)(void *ctx, const void *buf, size_t len, int dest, int tag);
    int (*recv)(void *ctx, void *buf, size_t len, int src, int tag);
    void (*destroy)(void *ctx); /* may be NULL */
} shs_comm_ops;
#define SHS_COMM_OPS_VERSION 1

/* A communicator over `ops`/`ctx` for rank `rank` of `size`. */
SHS_API int shs_comm_create(shs_comm **out, int rank, int size, const shs_comm_ops *ops, void *ctx);
/* A one-process communicator (rank 0 of 1). */
SHS_API int shs_comm_create_self(shs_comm **out);
/* Frees the communicator and calls ops->destroy(ctx).  NULL is a no-op. */
SHS_API void shs_comm_free(shs_comm *comm);
SHS_API int shs_comm_rank(const shs_comm *comm);
SHS_API int shs_comm_size(const shs_comm *comm);

/* ------------------------------------------------------------------------
 * Checkpoint configuration: the seeds' field names (MindSpore
 * Transformers' `checkpoint:` section and torchtitan's checkpoint config).
 * shs_config_init() sets the defaults; shs_config_set() sets one field
 * from text by name (as a YAML file or a command-line flag would), and
 * shs_config_load_yaml() reads the `checkpoint:` section of a YAML file.
 * Strings set through these are owned by the config: release it with
 * shs_config_release().  Strings assigned directly stay the caller's.
 * ---------------------------------------------------------------------- */
enum {
    SHS_EXCLUDE_OPTIMIZER = 1u << 0,
    SHS_EXCLUDE_LR_SCHEDULER = 1u << 1,
    SHS_EXCLUDE_DATALOADER = 1u << 2,
    SHS_EXCLUDE_TRAIN_STATE = 1u << 3,
    SHS_EXCLUDE_RNG = 1u << 4
};

typedef struct shs_config {
    unsigned version; /* SHS_CONFIG_VERSION */
    /* saving */
    int enable_save;                  /* default 1; 0: nothing is saved */
    const char *save_path;            /* required when saving */
    int64_t save_interleaved_steps;   /* save when global_step % n == 0 (1000) */
    int save_max;                     /* MindSpore: keep the newest n saves of
                                       THIS run, never another run's (5);
                                       0 = keep all */
    int keep_latest_k;                /* torchtitan: keep the newest k committed
                                       steps of the WHOLE save path, whatever
                                       run wrote them; if > 0 it replaces
                                       save_max.  Neither deletes the
                                       tracker's step nor a symlinked step */
    const char *prefix;               /* file name prefix ("checkpoint") */
    int no_save_optim;                /* save model weights only */
    int async_save;                   /* write in a background thread */
    int remove_redundancy;            /* replicas written once, by one of their
                                       holders, balanced by bytes (several
                                       ranks only) */
    int save_global_layout_cache;     /* keep that plan while no rank's layout
                                       changes (1) */
    int enable_first_step_checkpoint; /* also save after step 1 */
    int last_save_model_only;         /* final save holds model weights only */
    int incremental;                  /* do not rewrite unchanged tensors */
    int fsync;                        /* make commits durable (1) */
    int load_only;                    /* never save */
    int create_seed_checkpoint;       /* torchtitan: one process saves the
                                       freshly initialised model as step 0
                                       (see shs_manager_load) and exits;
                                       jobs then start from it with
                                       initial_load_path, resharded */
    /* loading */
    const char *load_path;         /* save path or step directory; "" none */
    int64_t load_step;             /* -1: newest */
    int no_load_optim;             /* weights only; refresh master weights */
    unsigned exclude_from_loading; /* SHS_EXCLUDE_* */
    const char *initial_load_path; /* used only if save_path and load_path
                                       have nothing */
    int initial_load_model_only;   /* (1) */
    int resume_fallback;           /* the tracker's step missing or damaged:
                                       load the newest earlier step that
                                       verifies instead of failing (0) */
    int load_balanced;             /* each needed saved chunk read by one
                                       rank, sent to the others (several
                                       ranks only) */
    int load_worker_number;        /* reader threads per rank (1; an encrypted
                                      checkpoint: at least 2) */
    int strict;                    /* missing/extra tensors are errors (1) */
    /* The strings shs_config_set and shs_config_load_yaml allocated for
       this config (the string fields above point into them); freed by
       shs_config_release.  NULL after shs_config_init; a config filled
       by the program alone keeps it NULL.  Never set it. */
    void *strings;
    /* version 2: starting from Hugging Face weights (docs/hf.md) */
    int initial_load_in_hf;       /* initial_load_path (else hf_assets_path)
                                     is a Hugging Face model: a folder with
                                     model.safetensors.index.json or
                                     model.safetensors, or either file;
                                     weights only (0) */
    const char *hf_assets_path;   /* torchtitan: used when initial_load_path
                                     is "" and initial_load_in_hf is set */
    const char *hf_name_map;      /* prefix rules "from=to,from=to" renaming
                                     the files' tensor names to registered
                                     names (longest prefix wins); "" none */
    const char *hf_name_map_file; /* a JSON object {"file name": "registered
                                     name"}, applied before the rules */
    /* version 3: encryption at rest (see its section below).  The key
       comes from a file (32 raw bytes, or 64 hex digits and an optional
       newline) or from the environment variable NAMED here (64 hex
       digits); never from the config itself.  At most one of the two;
       "" for none.  With a key every save is encrypted and encrypted
       checkpoints can be loaded; without one, loading an encrypted
       checkpoint fails with SHS_EKEY "key required". */
    const char *encrypt_key_file;
    const char *encrypt_key_env;
    /* (version 3) export at train end (docs/merge.md): after the final
       save of shs_manager_finish, the committed step's model tensors are
       written in the Hugging Face layout into
       <save_path>/hf-<step dir name> (e.g. hf-iteration_00000600), every
       rank writing whole files of it; a re-run replaces it.  Retention
       never deletes it (SHS_ENTRY_EXPORT). */
    int last_save_in_hf;      /* (0) */
    const char *export_dtype; /* floating-point tensors converted to this
                                 dtype (shs_dtype_parse_alias: "bfloat16",
                                 "bf16", "float32"...); "" as saved */
    /* version 4: with a key configured, the resume from save_path takes
       encrypted checkpoints only (an unencrypted one is refused with
       SHS_EKEY: it may be an encrypted one stripped of its encryption);
       set this to resume from unencrypted ones too (saved before
       encryption was turned on).  load_path and initial_load_path take
       unencrypted checkpoints and weights whatever it says. */
    int allow_unencrypted_resume; /* (0) */
    int enable;                   /* torchtitan's checkpoint.enable (1): 0 = no checkpoint is
                   loaded (not even the job's own save_path) and none is
                   saved, whatever the other fields say */
    /* torchtitan's initial_load_in_hf_quantized (docs/hf.md):
       the Hugging Face weights are FP8 (F8_E4M3) with block-wise scales
       as DeepSeek-V3 stores them ("<weight>_scale_inv", F32, one per
       128x128 block); each weight is dequantized (W * scale, rounded to
       F32, then to the registered dtype: F32, BF16 or F16) into any
       chunking, and the scales are consumed.  Requires initial_load_in_hf
       and initial_load_path, as torchtitan does (0) */
    int initial_load_in_hf_quantized;
} shs_config;
#define SHS_CONFIG_VERSION 4

SHS_API void shs_config_init(shs_config *config);
SHS_API void shs_config_release(shs_config *config);
/* Set field `key` (a field name above, e.g. "save_max") from text: "true"/
   "false"/"1"/"0" for flags, decimal integers, strings; for
   exclude_from_loading a comma list of optimizer, lr_scheduler,
   dataloader, train_state, rng.  torchtitan's names are accepted too
   (enable, folder, interval, async_mode, export_dtype, last_save_in_hf).  SHS_ECONFIG naming the key on
   error; an unknown key gets the closest known name (also for the names
   of other frameworks: strict_load, save_checkpoint_steps, ...); a field
   of a later version than the struct's is SHS_ECONFIG. */
SHS_API int shs_config_set(shs_config *config, const char *key, const char *value);
/* Read the `checkpoint:` mapping of a YAML file, and MindSpore
   Transformers' top-level load_checkpoint / resume_training and the
   CheckpointMonitor entry of `callbacks:` (docs/checkpoint.md), and
   torchtitan's top-level hf_assets_path (docs/hf.md), and the checkpoint
   keys of `train:` (seed 002: save_checkpoint_steps, keep_checkpoint_max,
   integrated_save, async_save); the other keys of `train:` and the other
   sections are the program's and are not read here (a program that says
   which it reads gets the rest refused: shs_config_load_yaml_ex).
   Unknown keys of `checkpoint:` are errors (SHS_ECONFIG,
   naming the key, file and line), as is a field set twice under any of
   its names.  On error *config is unchanged. */
SHS_API int shs_config_load_yaml(shs_config *config, const char *path);

/* What shs_config_load_yaml_ex() hands the program.  The library reads
   `checkpoint:`, the checkpoint keys of `train:` (MindSpore's
   save_checkpoint_steps, keep_checkpoint_max, integrated_save and
   async_save, no others), the CheckpointMonitor entry of `callbacks:`
   and the top-level keys above.  Every other key is offered to
   program_key, which returns 1 when the program honours it (or has said
   what it does with it) and 0 when it does not: the load then fails with
   SHS_ECONFIG naming the file, line and key, and `why` (a NUL-terminated
   text the callback may write, why_cap bytes) if the callback set it.
   Offered: each key of `train:` and of `model:` (section "train" /
   "model"), each other entry of `callbacks:` (section "callbacks", key =
   its type), and each other top-level key (section "").  `value` is the
   scalar as written, or NULL for a list or a mapping; `line` is the key's
   (1-based).  Keys are offered while the file is read: a later error
   still fails the load, so the program applies what it was offered only
   once the load succeeded.  program_key NULL:
   such keys are left to the program, unread, as shs_config_load_yaml
   does.  note (may be NULL) receives what the library accepted but wants
   the program to say (e.g. how MindSpore's integrated_save is met), as
   "FILE:LINE: ...". */
typedef struct shs_yaml_opts {
    unsigned version; /* SHS_YAML_OPTS_VERSION */
    int (*program_key)(void *ctx, const char *section, const char *key, const char *value,
                       size_t line, char *why, size_t why_cap);
    void (*note)(void *ctx, const char *message);
    void *ctx;
} shs_yaml_opts;
#define SHS_YAML_OPTS_VERSION 1u
#define SHS_YAML_OPTS_INIT                                                                         \
    {                                                                                              \
        SHS_YAML_OPTS_VERSION, NULL, NULL, NULL                                                    \
    }
/* shs_config_load_yaml with the program's part (above); opts NULL: as
   shs_config_load_yaml.  On error *config is unchanged (notes already
   delivered stay delivered). */
SHS_API int shs_config_load_yaml_ex(shs_config *config, const char *path,
                                    const shs_yaml_opts *opts);

/*
 * Starting from Hugging Face weights.
 *
 * No new function: shs_config (version 2) has initial_load_in_hf,
 * hf_assets_path, hf_name_map and hf_name_map_file, and
 * shs_manager_load() then starts a job from a Hugging Face model when
 * it would use initial_load_path (docs/hf.md):
 *   - the path (initial_load_path, else hf_assets_path) is a folder with
 *     model.safetensors.index.json or model.safetensors, or either file;
 *     files come from the index's weight_map only, and an index that
 *     disagrees with its files is SHS_ECORRUPT naming them;
 *   - weights only (initial_load_model_only must be true: SHS_ECONFIG at
 *     create otherwise); master weights refreshed; progress untouched;
 *   - names renamed by the map file's entries, else the longest matching
 *     hf_name_map prefix rule; two tensors onto one name: SHS_EMISMATCH;
 *   - any chunking, load_balanced, load_worker_number as for any load;
 *     float dtypes converted (a BF16 file into F32 weights);
 *   - strict: registered tensors missing from the files are an error
 *     naming them; tensors of the files nobody registered are listed in
 *     shs_load_result.skipped, the message and shs_manager_warning().
 * shs_load_result: source SHS_LOAD_INITIAL, path the index or
 * model.safetensors, step -1, bytes_read this rank's tensor bytes read.
 */

/* ------------------------------------------------------------------------
 * Checkpoint manager: the save/resume policy of a training run.
 *
 *   shs_manager_create()  validates the config and removes leftovers of
 *                         failed saves under save_path;
 *   shs_manager_load()    resolves what to load (load_path, tracker,
 *                         auto-resume, initial_load_path) and loads it;
 *   shs_manager_step()    after each optimizer step: saves when due;
 *   shs_manager_finish()  the final save at the end of training;
 *   shs_manager_free()    waits for an async save in flight.
 *
 * Directory layout, commit protocol and metadata: docs/checkpoint.md.
 * ---------------------------------------------------------------------- */
typedef struct shs_manager shs_manager;

SHS_API int shs_manager_create(shs_manager **out, const shs_config *config, shs_state *state);
/* The same for one rank of a distributed job: every rank of `comm` calls
   it (and then every manager function) collectively.  `comm` must outlive
   the manager. */
SHS_API int shs_manager_create_comm(shs_manager **out, const shs_config *config, shs_state *state,
                                    shs_comm *comm);
SHS_API void shs_manager_free(shs_manager *m);

/* Where a load came from (shs_load_result.source). */
enum {
    SHS_LOAD_NONE = 0,      /* nothing anywhere: fresh start */
    SHS_LOAD_SAVE_PATH = 1, /* the job's own committed checkpoints */
    SHS_LOAD_LOAD_PATH = 2,
    SHS_LOAD_INITIAL = 3, /* initial_load_path */
    SHS_LOAD_SEED = 4     /* create_seed_checkpoint: nothing loaded */
};

/* What a load did.  Initialise with SHS_LOAD_RESULT_INIT (the version is
   checked, so that fields can be added).  The strings and the array are
   the manager's: valid until its next load or shs_manager_free. */
typedef struct shs_load_result {
    unsigned version; /* SHS_LOAD_RESULT_VERSION */
    int loaded;       /* 0: nothing to load, fresh start */
    int source;       /* SHS_LOAD_* */
    const char *path; /* the step directory loaded ("" if none) */
    int64_t step;     /* its step */
    int optimizer_loaded;
    int progress_loaded;          /* *progress was filled from common.json */
    int batch_size_changed;       /* global_step was rescaled: the data
                                   cursor must come from consumed_samples */
    int rank_state_restored;      /* rank-local blobs restored: only when the
                                   checkpoint's world size equals this job's
                                   (the caller knows whether its layout of
                                   rank-local state also stayed the same) */
    int saved_world_size;         /* world size the checkpoint was saved with */
    uint64_t bytes_read;          /* tensor bytes this rank read from storage */
    size_t n_skipped;             /* non-strict: tensors skipped */
    const char *const *skipped;   /* their names (n_skipped of them) */
    int fell_back;                /* resume_fallback: the tracker's step was
                                   missing or damaged, an earlier step that
                                   verifies was loaded (see message) */
    int tracker_repaired;         /* the tracker was behind the newest complete
                                   step (or missing): that step was loaded
                                   and the tracker rewritten */
    int consumed_samples_derived; /* common.json had no consumed_samples
                                   (MindSpore, six keys): global_step x
                                   global_batch_size was used */
    const char *message;          /* what was chosen and why, for the log */
} shs_load_result;
#define SHS_LOAD_RESULT_VERSION 1u
#define SHS_LOAD_RESULT_INIT                                                                       \
    {                                                                                              \
        SHS_LOAD_RESULT_VERSION, 0, 0, "", -1, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, ""              \
    }

/*
 * Load per the config.  Resume order (docs/checkpoint.md, "Resume"):
 *
 *  1. the job's own committed checkpoints in save_path: the tracker's step
 *     (load_step picks another).  A tracker behind the newest complete step
 *     (a crash between the commit rename and the tracker update) loads the
 *     newest complete step that verifies and rewrites the tracker (rank 0),
 *     result.tracker_repaired.  A tracker naming a missing or damaged step
 *     fails, naming the newest earlier step that verifies; with
 *     resume_fallback that step is loaded (result.fell_back).  A
 *     weights-only step (last_save_model_only, no_save_optim) is skipped
 *     while an earlier full one exists.  Options: load_step,
 *     exclude_from_loading, strict; no_load_optim and the initial_*
 *     options do NOT apply (a crashed job resumes all its own state).
 *  2. else load_path (a save path or one step directory, or a folder of
 *     plain safetensors files named as such): load_step, no_load_optim,
 *     exclude_from_loading, strict apply.  It must exist.
 *  3. else initial_load_path: initial_load_model_only, exclude_from_loading,
 *     strict apply (load_step does not: it is the tracker's step).  It must
 *     exist.  With initial_load_in_hf: Hugging Face weights (see the
 *     section "Hugging Face weights" at the end of this header).
 *  4. else nothing: a fresh start (result.loaded 0).
 *
 * Only "does not exist" (ENOENT) of save_path means "nothing to resume";
 * any other error on it (EACCES, EIO, ENOTDIR, a malformed tracker) fails.
 * With create_seed_checkpoint nothing is loaded:
 * the caller initialises its state, saves it with shs_manager_save at
 * global_step 0 (model weights only are kept) and exits.  Tensors are read straight into the registered
 * buffers: if the load fails part-way (e.g. a checksum mismatch), some
 * buffers may already hold checkpoint data -- treat the state as
 * undefined and either retry or start fresh.  `progress` is in/out: its global_batch_size is the
 * current run's (for the rescaling rule); the rest is overwritten from the
 * checkpoint unless train_state is excluded or weights only are loaded.
 * `result` may be NULL.
 */
SHS_API int shs_manager_load(shs_load_result *result, shs_manager *m, shs_progress *progress);

/*
 * Call after each optimizer step with the updated progress.  Saves when
 * global_step % save_interleaved_steps == 0 (or at step 1 with
 * enable_first_step_checkpoint).  With async_save the state is copied into
 * staging buffers and written in the background; an error of an earlier
 * background save is returned here.  *saved (may be NULL) tells whether a
 * save was started.
 */
SHS_API int shs_manager_step(int *saved, shs_manager *m, const shs_progress *progress);

/*
 * Save now, regardless of the interval (e.g. before a planned stop).
 * flags: SHS_SAVE_DEFER_SNAPSHOT (async only) returns before the state is
 * copied: the caller may run compute that only reads the state, and must
 * call shs_manager_fence() before changing it.  (Where the copy-free
 * snapshot is used -- docs/checkpoint.md, "Async save" -- the snapshot is
 * taken before the call returns whatever the flag, and the fence returns at
 * once.)  SHS_SAVE_IF_DUE: save only when shs_manager_step would (the
 * interval rule), so that a training loop can defer the snapshot of its
 * periodic saves; returns 1 when a save was started, SHS_OK (0) when none
 * was due.
 */
enum {
    SHS_SAVE_DEFER_SNAPSHOT = 1u << 0,
    SHS_SAVE_MODEL_ONLY = 1u << 1,
    SHS_SAVE_IF_DUE = 1u << 2
};
SHS_API int shs_manager_save(shs_manager *m, const shs_progress *progress, unsigned flags);
/* Wait until the snapshot of the save in flight has been taken. */
SHS_API int shs_manager_fence(shs_manager *m);
/* Wait until the save in flight is committed; returns its status. */
SHS_API int shs_manager_wait(shs_manager *m);
/* Final save (unless this step was just saved), then wait. */
SHS_API int shs_manager_finish(shs_manager *m, const shs_progress *progress);

/* Statistics of the last committed save, as seen by this rank: state and
   written bytes are this rank's; max_rank_bytes and write_balance cover
   all ranks.  Initialise with SHS_SAVE_STATS_INIT (the version is
   checked). */
typedef struct shs_save_stats {
    unsigned version; /* SHS_SAVE_STATS_VERSION */
    int64_t step;
    uint64_t state_bytes;      /* bytes of tensors in the checkpoint */
    uint64_t bytes_written;    /* bytes actually written (incremental) */
    uint64_t bytes_linked;     /* bytes reused from the previous save */
    double blocked_seconds;    /* time the caller was blocked */
    double total_seconds;      /* start to commit */
    uint64_t max_rank_bytes;   /* most bytes written by one rank */
    double write_balance;      /* max / mean bytes written per rank (1 rank: 1) */
    size_t retention_failures; /* old steps retention could not delete (the
                                 save itself succeeded): shs_manager_warning */
    /* version 2 (docs/checkpoint.md, "Async save"): */
    uint64_t staging_bytes;          /* async staging memory the manager holds (allocated
                                       at create, reused by every save; 0: sync) */
    uint64_t staging_huge_bytes;     /* of which the kernel backs by huge pages */
    double staging_prefault_seconds; /* time the background thread took to fault
                                        the staging memory in */
    int snapshot_mode;               /* SHS_SNAPSHOT_*: how this save's snapshot was taken */
    uint64_t snapshot_copied_bytes;  /* copy-free: bytes of pages the caller wrote during
                                       the save, copied before the write went ahead */
    uint64_t snapshot_extra_bytes;   /* copy-free: peak memory the snapshot took besides
                                       the state (copied pages, partial pages at the
                                       tensors' edges, its page table) */
} shs_save_stats;
#define SHS_SAVE_STATS_VERSION 2u
#define SHS_SAVE_STATS_INIT                                                                        \
    {                                                                                              \
        SHS_SAVE_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0                        \
    }
/* shs_save_stats.snapshot_mode */
enum {
    SHS_SNAPSHOT_NONE = 0,     /* a synchronous save: written from the state itself */
    SHS_SNAPSHOT_COPY = 1,     /* async: copied into the staging memory */
    SHS_SNAPSHOT_DEFERRED = 2, /* async with SHS_SAVE_DEFER_SNAPSHOT: copied by the
                                  background thread (shs_manager_fence waits) */
    SHS_SNAPSHOT_COPY_FREE = 3 /* async, copy-free: the state was write-protected
                                  (userfaultfd) and written from where it is */
};
SHS_API int shs_manager_last_save(shs_save_stats *out, const shs_manager *m);

/* The latest warning of the manager (e.g. "retention could not delete
   <dir>: Permission denied"), or NULL when there is none.  Failures that
   do not stop the job (a failed deletion of an old step) are warnings, not
   errors.  Owned by the manager: valid until its next call. */
SHS_API const char *shs_manager_warning(const shs_manager *m);

/*
 * With shs_config.last_save_in_hf, shs_manager_finish() ends, after the
 * final save is committed, by exporting that step's model tensors in the
 * Hugging Face layout (shs_merge: model.safetensors or
 * model-0000I-of-0000N.safetensors + model.safetensors.index.json) into
 * <save_path>/hf-<step dir name>, e.g. hf-iteration_00000600, with
 * floating-point tensors converted to export_dtype ("" keeps them).  On N
 * ranks each rank writes whole files (shs_merge part rank/N), then rank 0
 * gathers them and writes the index (shs_merge_finish).  Every rank
 * returns the same outcome: a failure on any rank fails finish on all,
 * with that rank's message, and leaves no export directory (an earlier
 * one of the same name is kept whole).  An existing export of the same
 * step is replaced.  An encrypted run (encrypt_key_file / _env) refuses
 * last_save_in_hf at shs_manager_create (the export would be plaintext).
 */

/* The export directory of this manager's last successful export, or NULL
   (none yet).  Valid until the next manager call. */
SHS_API const char *shs_manager_export_dir(const shs_manager *m);

/* ------------------------------------------------------------------------
 * Reading checkpoints: any source, the same engine as the manager's load.
 * ---------------------------------------------------------------------- */

/*
 * Reading checkpoints: one handle for every checkpoint source, the same
 * engine (and the same checksum checks) as the manager's load.  Tools,
 * exporters and bindings read tensors through it.
 *
 * shs_checkpoint_open() accepts
 *   - a save path: its tracker's step, else the newest complete step
 *     (as shs_checkpoint_resolve);
 *   - a step directory (holding metadata.json), ours or torchtitan's
 *     step-N; metadata.json is validated completely (docs/checkpoint.md);
 *   - a Hugging Face model.safetensors.index.json, or a folder holding
 *     one: the files and which tensor each holds come from its weight_map,
 *     never from a directory listing; a file name outside the index's
 *     folder, a missing file, a tensor its file does not hold, or a
 *     tensor of a named file that the map does not assign to that file is
 *     SHS_ECORRUPT naming it;
 *   - a plain folder of .safetensors files (each tensor whole, names
 *     unique across files), or one .safetensors file.
 * A directory named iteration_* / step-*, or holding common.json, but
 * without metadata.json is a damaged checkpoint: SHS_ECORRUPT naming it,
 * never read as a plain folder.  Files without metadata.json ("plain")
 * have no checksums: their data is read unchecked.
 *
 * Ownership: every pointer the accessors return (names, shapes, chunk
 * boxes, paths) belongs to the handle and stays valid until
 * shs_checkpoint_free().
 *
 * Thread safety: after open the handle may be used from several threads
 * at once (reads included): data files are opened on first use, under a
 * mutex inside the handle, and a data file is never opened twice.
 * shs_checkpoint_free() must not race with other calls on the handle.
 */
typedef struct shs_checkpoint shs_checkpoint;

enum {
    SHS_CHECKPOINT_OPEN_NO_MMAP = 1u << 0 /* read data files with pread, never
                                         mmap (files that may change) */
};

typedef struct shs_checkpoint_open_opts {
    unsigned version; /* SHS_CHECKPOINT_OPEN_OPTS_VERSION */
    int64_t step;     /* save path: this step (SHS_ENOCHECKPOINT when it
                           has no complete directory); -1: the tracker's
                           step, else the newest.  A step directory must
                           be of this step when it is >= 0. */
    unsigned flags;   /* SHS_CHECKPOINT_OPEN_* */
    /* version 2: the key of an encrypted checkpoint ("encryption at
       rest" below): key_len must be SHS_KEY_BYTES; NULL: none (an
       encrypted checkpoint then opens, names and shapes readable, and
       each read is SHS_EKEY "key required").  A key that is not the
       checkpoint's fails the open (SHS_EKEY "wrong key"), as does a key
       given for an unencrypted checkpoint (SHS_EKEY "not encrypted":
       the key would authenticate nothing; open it without one) and an
       encrypted metadata.json that does not authenticate under the key
       (SHS_ECHECKSUM).  Copied: the caller may wipe it after the open. */
    const unsigned char *key;
    size_t key_len;
} shs_checkpoint_open_opts;
#define SHS_CHECKPOINT_OPEN_OPTS_VERSION 2
#define SHS_CHECKPOINT_OPEN_OPTS_INIT                                                              \
    {                                                                                              \
        SHS_CHECKPOINT_OPEN_OPTS_VERSION, -1, 0, NULL, 0                                           \
    }

/* Open a checkpoint (see above).  `opts` may be NULL (the defaults).  On
   failure *out is NULL.  Release with shs_checkpoint_free(). */
SHS_API int shs_checkpoint_open(shs_checkpoint **out, const char *path,
                                const shs_checkpoint_open_opts *opts);
/* Close the handle and its files.  NULL is a no-op. */
SHS_API void shs_checkpoint_free(shs_checkpoint *ckpt);

/* What was opened, resolved: the step directory (for a save path), the
   folder, the index file or the .safetensors file. */
SHS_API const char *shs_checkpoint_path(const shs_checkpoint *ckpt);

typedef struct shs_checkpoint_tensor_info {
    const char *name;
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    const uint64_t *shape; /* global shape */
    size_t n_chunks;
} shs_checkpoint_tensor_info;

/* Result structs that can grow: the caller sets `version` (use the
   *_INIT macro); the library fills only the fields of that version and
   refuses (SHS_EINVAL) a version it does not know. */
typedef struct shs_chunk_info {
    unsigned version;              /* SHS_CHUNK_INFO_VERSION */
    const uint64_t *offset;        /* position of the chunk in the global tensor */
    const uint64_t *shape;         /* its shape */
    size_t file;                   /* index of the file holding it */
    const char *key;               /* its name inside that file */
    uint64_t byte_begin, byte_end; /* absolute byte range in the file */
    uint64_t xxh3;
    int has_xxh3; /* 0 for plain files */
} shs_chunk_info;
#define SHS_CHUNK_INFO_VERSION 1
#define SHS_CHUNK_INFO_INIT                                                                        \
    {                                                                                              \
        SHS_CHUNK_INFO_VERSION, NULL, NULL, 0, NULL, 0, 0, 0, 0                                    \
    }

typedef struct shs_blob_info {
    unsigned version; /* SHS_BLOB_INFO_VERSION */
    const char *name;
    int rank;
    size_t file;
    const char *key;
    uint64_t byte_begin, byte_end;
    uint64_t xxh3;
    uint64_t size; /* bytes (byte_end - byte_begin) */
} shs_blob_info;
#define SHS_BLOB_INFO_VERSION 1
#define SHS_BLOB_INFO_INIT                                                                         \
    {                                                                                              \
        SHS_BLOB_INFO_VERSION, NULL, 0, 0, NULL, 0, 0, 0, 0                                        \
    }

/* Step and world size (-1 / 1 when there is no metadata.json). */
SHS_API int64_t shs_checkpoint_step(const shs_checkpoint *ckpt);
SHS_API int shs_checkpoint_world_size(const shs_checkpoint *ckpt);
/* The version of the opened metadata.json: 2 (what saves write) or 1 (an
   older release's: common.json, the files' headers and metadata.json
   itself are not covered by checksums); 0 when there is none (plain
   folder, index, file). */
SHS_API int shs_checkpoint_format_version(const shs_checkpoint *ckpt);
SHS_API size_t shs_checkpoint_file_count(const shs_checkpoint *ckpt);
/* File names, relative to the folder of shs_checkpoint_path. */
SHS_API const char *shs_checkpoint_file_name(const shs_checkpoint *ckpt, size_t index);
SHS_API int shs_checkpoint_file_rank(const shs_checkpoint *ckpt, size_t index);
/* Tensors, sorted by name. */
SHS_API size_t shs_checkpoint_tensor_count(const shs_checkpoint *ckpt);
SHS_API const shs_checkpoint_tensor_info *shs_checkpoint_tensor(const shs_checkpoint *ckpt,
                                                                size_t index);
SHS_API int shs_checkpoint_find(size_t *out_index, const shs_checkpoint *ckpt, const char *name);
SHS_API int shs_checkpoint_chunk(shs_chunk_info *out, const shs_checkpoint *ckpt, size_t tensor,
                                 size_t chunk);
SHS_API size_t shs_checkpoint_blob_count(const shs_checkpoint *ckpt);
SHS_API int shs_checkpoint_blob(shs_blob_info *out, const shs_checkpoint *ckpt, size_t index);
/* What can be checked without reading tensor data: every file the
   checkpoint names is present as a regular file (not followed through a
   link) of the size metadata.json records (version 2 and later), and its
   common.json matches its checksum and reads.  SHS_ENOENT naming a
   missing file, SHS_ECHECKSUM for a size or checksum that differs.  The
   fast checks of `shardsafe ls` and `shardsafe diff` are this. */
SHS_API int shs_checkpoint_check_files(const shs_checkpoint *ckpt);

/*
 * Read the box [start[d], start[d] + count[d]) of global tensor `tensor`
 * (NULL start and count: the whole tensor) into `dst`, dense and
 * row-major, as `dtype`: the stored dtype is copied; float to float goes
 * through shs_convert (round to nearest even); any other conversion is
 * SHS_ECONVERT naming both dtypes.  The box is assembled from every saved
 * chunk it intersects -- any saved chunking, any box -- and each chunk is
 * checked against its checksum before its bytes are used (the whole
 * chunk, or only the 4 MiB blocks the box touches when the chunk has
 * block checksums): SHS_ECHECKSUM naming the file.  Chunks that do not
 * cover the box: SHS_ECORRUPT naming the tensor.
 * Argument errors, with nothing written to dst: the box outside the
 * tensor, or dst_len not exactly the box's elements x the dtype's size
 * (SHS_ERANGE); a box of sub-byte elements (F4, F6_*) whose rows do not
 * cover whole bytes (SHS_EINVAL).  On a data error dst may be partly
 * written.  Memory: bounded by dst; mapped files are read in place, with
 * SHS_CHECKPOINT_OPEN_NO_MMAP at most one 4 MiB block (or one smaller chunk)
 * is buffered at a time.  Thread-safe on one handle.
 */
SHS_API int shs_checkpoint_read(const shs_checkpoint *ckpt, size_t tensor, const uint64_t *start,
                                const uint64_t *count, shs_dtype dtype, void *dst, size_t dst_len);

/* Read blob `blob` (its size: shs_blob_info.size, which dst_len must
   equal, else SHS_ERANGE), checked against its checksum. */
SHS_API int shs_checkpoint_read_blob(const shs_checkpoint *ckpt, size_t blob, void *dst,
                                     size_t dst_len);

/* common.json of the opened step, validated (the seven keys; a missing
   consumed_samples is global_step x global_batch_size); SHS_ENOTFOUND
   for a checkpoint without metadata.json. */
SHS_API int shs_checkpoint_progress(shs_progress *out, const shs_checkpoint *ckpt);

/* What shs_checkpoint_open read.  shardsafe: a step directory with our
   metadata.json (checksums); plain: safetensors files without one (a
   folder, a Hugging Face index, one file; no checksums); mindspore: a
   MindSpore Transformers "Checkpoint 2.0" step directory, either its
   metadata.json (state_dict_metadata + storage_data, any tensor_map
   layout with even splits) or a single-card save without metadata.json
   whose files all say {"format": "ms"} in __metadata__.  MindSpore
   files carry no checksums: their data is read unchecked, and
   shs_checkpoint_verify checks headers and layout, reads every tensor
   back and compares replicated copies of a slice byte for byte
   (SHS_ECORRUPT naming both files when they differ); data stored once
   is not checked (docs/format.md).  The manager loads such directories
   (reshard included) like ours.  For them shs_checkpoint_format_version
   is 0. */
typedef enum shs_format {
    SHS_FORMAT_SHARDSAFE = 0,
    SHS_FORMAT_PLAIN = 1,
    SHS_FORMAT_MINDSPORE = 2
} shs_format;

/* The format of an open checkpoint (an shs_format value), or
   SHS_EINVAL for NULL. */
SHS_API int shs_checkpoint_format(const shs_checkpoint *ckpt);
/* "shardsafe", "plain", "mindspore"; NULL for another value. */
SHS_API const char *shs_format_name(int format);

/* Resolve a load path: a save path (tracker, else the newest complete
   iteration_* / step-* directory; `step` >= 0 picks that step), a step
   directory (one without metadata.json is SHS_ECORRUPT), or a folder of
   plain safetensors files with no step directory.  Writes the step
   directory into out (cap bytes); SHS_ERANGE when it does not fit. */
SHS_API int shs_checkpoint_resolve(char *out, size_t cap, const char *path, int64_t step);

/* Verify a step directory: metadata.json, every referenced file present,
   inside the directory and valid, every chunk's checksum.  `key`
   (key_len SHS_KEY_BYTES; NULL and 0 for none) is the key of an
   encrypted checkpoint: metadata.json is then authenticated under it,
   and every chunk is checked against its checksum, then decrypted (into
   scratch buffers) and authenticated.  A key given for an unencrypted
   checkpoint is SHS_EKEY "not encrypted".  Without a key an encrypted
   checkpoint is checked against its checksums (damage is found without
   the key) and then fails with SHS_EKEY "key required": its chunks
   cannot be authenticated. */
SHS_API int shs_checkpoint_verify(const char *step_dir, const unsigned char *key, size_t key_len);

/* 1 when the opened checkpoint is encrypted, else 0.  Its key id (16 hex
   digits, names the key without revealing it) or "" . */
SHS_API int shs_checkpoint_encrypted(const shs_checkpoint *ckpt);
SHS_API const char *shs_checkpoint_key_id(const shs_checkpoint *ckpt);

/* ------------------------------------------------------------------------
 * Encryption at rest.
 * ---------------------------------------------------------------------- */

/*
 * Optional AES-256-GCM (OpenSSL libcrypto) of every tensor chunk a save
 * writes (docs/encryption.md).  Each chunk is a STREAM of 1 MiB segments,
 * each its own GCM message under a key of the chunk's own (HKDF from the
 * key and a random salt), its nonce holding the segment's index and a
 * last-segment flag; the additional authenticated data binds every
 * segment to its tensor name, dtype, global shape, offset, shape, step
 * and save (a random id per save), and metadata.json carries an
 * HMAC-SHA256 under the key.  So a changed byte, a segment or chunk moved,
 * swapped or cut off, an edited metadata.json, or a wrong key fails with a
 * clear error instead of loading garbage; segments are decrypted and
 * verified on several threads, and a read of part of a chunk decrypts
 * only the segments it touches.  Checkpoints of the release before
 * (metadata.json version 3, one GCM message per chunk) still load and
 * verify.  What stays readable without the key: file names, the
 * safetensors headers (tensor names, dtypes, shapes), metadata.json
 * (which records the cipher, the key id and each chunk's salt and tags),
 * common.json, and the rank-local blobs (rng, dataloader state).  The
 * files stay valid safetensors files whose payload is ciphertext, marked
 * so in their header ("shardsafe_cipher"): such a file is never read as
 * plain data.
 *
 * A key given means an encrypted checkpoint is expected: verify and the
 * read API refuse an unencrypted one with a key (SHS_EKEY "not
 * encrypted"), and the manager, a key configured, resumes from save_path
 * only encrypted ones unless allow_unencrypted_resume (load_path and
 * initial_load_path take plain weights as ever).
 *
 * Keys are 32 bytes.  The manager takes one from the config fields
 * encrypt_key_file / encrypt_key_env, the read API from
 * shs_checkpoint_open_opts.key, verify from shs_checkpoint_verify's key; the CLI
 * from --key-file PATH or --key-env NAME (never the key itself as an
 * argument).
 */

#define SHS_KEY_BYTES 32

/* Read a key: from `key_file` (exactly 32 raw bytes, or 64 hex digits
   and an optional newline) or from the environment variable named
   `key_env` (64 hex digits); exactly one of the two non-NULL and
   non-empty.  SHS_EKEY naming the file or variable: missing, unset,
   unreadable, too short, too long, not hex.  Wipe `key` after use. */
SHS_API int shs_key_load(unsigned char key[SHS_KEY_BYTES], const char *key_file,
                         const char *key_env);

/* ========================================================================
 * ADVANCED API
 *
 * Save paths and what is at a path, the offline tools.
 * ===================================================================== */

/* ------------------------------------------------------------------------
 * What is at a path.  One answer, shared by the manager's loads, the read
 * API, the tools and the CLI: each of them reads only the kinds it says
 * it reads and names the kind it found when it refuses one.  [advanced;
 * shs_savepath_* and shs_hf_index_*: experimental]
 * ---------------------------------------------------------------------- */
typedef enum shs_source_kind {
    SHS_SOURCE_NONE = 0,         /* nothing there: the path does not exist */
    SHS_SOURCE_SAVE_PATH = 1,    /* a save path: the tracker and/or step
                                    directories (ours, torchtitan's step-N or
                                    MindSpore's), complete or not */
    SHS_SOURCE_STEP = 2,         /* a shardsafe step directory (metadata.json) */
    SHS_SOURCE_MS_STEP = 3,      /* a MindSpore Transformers Checkpoint 2.0 step
                                    directory (its metadata.json) */
    SHS_SOURCE_MS_SINGLE = 4,    /* a single-card MindSpore save: common.json and
                                    files that say {"format": "ms"}, no
                                    metadata.json */
    SHS_SOURCE_FOLDER = 5,       /* a folder of plain .safetensors files */
    SHS_SOURCE_HF_INDEX = 6,     /* a Hugging Face model.safetensors.index.json,
                                    or a folder holding one */
    SHS_SOURCE_FILE = 7,         /* one safetensors file */
    SHS_SOURCE_DAMAGED_STEP = 8, /* a step directory (by its name or its
                                    common.json) without metadata.json: an
                                    incomplete or damaged checkpoint */
    SHS_SOURCE_STEP_PART = 9,    /* a file of a checkpoint that is not one by
                                    itself: a step's metadata.json or
                                    common.json, a save path's tracker */
    SHS_SOURCE_OTHER = 10,       /* a file that is none of these (a text file) */
    SHS_SOURCE_OTHER_FOLDER = 11 /* a folder that is none of these (empty, or
                                    holding no checkpoint) */
} shs_source_kind;

/* What `path` is, without reading tensor data (a step directory's
   metadata.json is read to tell ours from MindSpore's; a file's first
   bytes to tell a safetensors file from another).  SHS_OK with *out set,
   SHS_SOURCE_NONE included; only a failure to look (EACCES, EIO) is an
   error, with its errno's status. */
SHS_API int shs_path_kind(shs_source_kind *out, const char *path);
/* "save path", "step directory", ...: a phrase for messages; NULL for a
   value that is no kind. */
SHS_API const char *shs_source_kind_name(shs_source_kind kind);

/* What an entry of a save path is, by its name alone -- the rules the
   library itself uses, for tools that list or clean a save path. */
typedef enum shs_savepath_entry {
    SHS_ENTRY_OTHER = 0, /* not ours: never listed as a step, never deleted */
    SHS_ENTRY_STEP,      /* iteration_%08d or step-N (complete or not) */
    SHS_ENTRY_LEFTOVER,  /* of a failed save: .tmp-*, .trash-*, .replaced-*
                               (a step displaced by a re-save, restored by
                               shs_checkpoint_clean when its name is free), or
                               a temporary of the tracker */
    SHS_ENTRY_TRACKER,   /* latest_checkpointed_iteration.txt */
    SHS_ENTRY_LOCK,      /* SHS_SAVEPATH_LOCK_NAME, never deleted */
    SHS_ENTRY_EXPORT     /* hf-<step dir name>: the export at train end
                            (last_save_in_hf), never deleted by retention
                            or prune; its temporaries (hf-<step>.tmp-*,
                            .part-*, .old-*) are leftovers */
} shs_savepath_entry;
SHS_API shs_savepath_entry shs_savepath_entry_kind(const char *name);

/*
 * The entries of a save path as the library reads them: which are
 * committed steps, which directory a load of each step reads, the
 * tracker.  Resume, verify, prune, retention and `shardsafe ls` share
 * this one reading.  A re-save's parked copy (.replaced-iteration_N-*,
 * left when a re-save without RENAME_EXCHANGE was killed between its two
 * renames) whose iteration_N does not exist IS step N: it is `selected`
 * and `parked`, loads read it, and the next start renames it back.
 */
typedef struct shs_savepath shs_savepath;
typedef struct shs_savepath_item {
    const char *name;        /* the entry's name in the save path */
    shs_savepath_entry kind; /* by its name (shs_savepath_entry_kind), except
                                that an entry named like a step that is no
                                directory is SHS_ENTRY_OTHER and a parked
                                copy that is its step's directory is
                                SHS_ENTRY_STEP */
    int64_t step;            /* a step or an export: its step; else -1 */
    int complete;            /* a step directory holding metadata.json and
                                common.json (or a single-card MindSpore save) */
    int selected;            /* THE directory of its step: what loads read */
    int parked;              /* selected, and a parked copy (see above) */
    int latest;              /* the selected directory of the tracker's step */
} shs_savepath_item;
/* Read a save path.  SHS_ENOENT when it does not exist.  Entries sorted
   by name.  The handle owns every string. */
SHS_API int shs_savepath_open(shs_savepath **out, const char *save_path);
SHS_API size_t shs_savepath_count(const shs_savepath *savepath);
SHS_API const shs_savepath_item *shs_savepath_item_at(const shs_savepath *savepath, size_t index);
/* The tracker's step: SHS_OK; SHS_ENOENT when there is none; otherwise
   the error reading it gave (SHS_ECORRUPT for a malformed one), with its
   message. */
SHS_API int shs_savepath_tracker(int64_t *step, const shs_savepath *savepath);
/* NULL is a no-op. */
SHS_API void shs_savepath_free(shs_savepath *savepath);

/*
 * A Hugging Face model.safetensors.index.json, read by the one reader the
 * library's own loads use (size cap 256 MiB, strict JSON, duplicate keys
 * refused, file names by shs_file_name_problem).  For tools that report
 * every problem of an index rather than stop at the first, as a load does.
 */
typedef struct shs_hf_index shs_hf_index;
typedef struct shs_hf_index_entry {
    const char *tensor; /* the weight_map key (may hold NUL: tensor_len) */
    size_t tensor_len;
    const char *file;    /* the file it names, or NULL when it cannot be used */
    const char *problem; /* NULL, or why the entry cannot be used */
} shs_hf_index_entry;
/* Parse an index.  Fails (SHS_ECORRUPT naming the file) only when the
   document is no index: not JSON, not an object, no "weight_map" object;
   a bad entry is kept with its problem. */
SHS_API int shs_hf_index_open(shs_hf_index **out, const char *path);
SHS_API const char *shs_hf_index_path(const shs_hf_index *index);
/* Entries sorted by file name, then tensor name. */
SHS_API size_t shs_hf_index_count(const shs_hf_index *index);
SHS_API const shs_hf_index_entry *shs_hf_index_entry_at(const shs_hf_index *index, size_t i);
/* The distinct usable file names, sorted. */
SHS_API size_t shs_hf_index_file_count(const shs_hf_index *index);
SHS_API const char *shs_hf_index_file(const shs_hf_index *index, size_t i);
/* The "metadata" object as written in the file (`*len` bytes of JSON,
   not NUL-terminated), or NULL when there is none. */
SHS_API const char *shs_hf_index_metadata(const shs_hf_index *index, size_t *len);
/* metadata.total_size: SHS_OK; SHS_ENOENT when absent; SHS_ECORRUPT when
   it is not a non-negative integer. */
SHS_API int shs_hf_index_total_size(uint64_t *out, const shs_hf_index *index);
/* Every disagreement between the index and the shard `file` (opened as
   f): a weight_map entry of that file the shard lacks, a tensor of the
   shard the map does not list, or lists in another file.  Each is handed
   to report(ctx, message) (may be NULL); returns how many there were.
   A load refuses an index with any. */
typedef void (*shs_problem_fn)(void *ctx, const char *message);
SHS_API size_t shs_hf_index_check_file(const shs_hf_index *index, const char *file,
                                       const shs_file *f, shs_problem_fn report, void *ctx);
/* NULL is a no-op. */
SHS_API void shs_hf_index_free(shs_hf_index *index);

/* ------------------------------------------------------------------------
 * Save paths: steps, tracker, maintenance, the writer's lock.
 * ---------------------------------------------------------------------- */

/* Committed steps, ascending: up to `cap` go to
   `steps`, *n gets the total.  A step counts when its directory
   (iteration_%08d or step-N) holds metadata.json and common.json. */
SHS_API int shs_checkpoint_list(int64_t *steps, size_t cap, size_t *n, const char *save_path);
/* Step of a step directory's name, or -1: exactly the names a save writes,
   "iteration_%08lld" or "step-N" (not "iteration_4" nor "step-04"). */
SHS_API int64_t shs_checkpoint_step_of_name(const char *name);
/* The name of step `step`'s directory: "iteration_%08d" (what saves
   write), or with `torchtitan` nonzero "step-N" (read, never written).
   Returns what snprintf returns; -1 for a NULL buf or negative step. */
SHS_API int shs_checkpoint_step_dir_name(char *buf, size_t cap, int64_t step, int torchtitan);

/* The tracker's step: SHS_ENOENT when there is none, SHS_ECORRUPT when it
   does not hold a decimal step. */
SHS_API int shs_checkpoint_read_tracker(int64_t *step, const char *save_path);
/* Delete a step directory safely: renamed to a .trash- sibling first, so
   a crash mid-delete never leaves a half-deleted step.  Holds the save
   path's lock (shs_savepath_lock) while it works, unless this process
   already holds it through shs_savepath_lock(): SHS_ELOCKED, naming the
   holder, while a manager (or another tool) holds it. */
SHS_API int shs_checkpoint_remove(const char *save_path, int64_t step);
/* Clean a save path after a crash: a step displaced by an interrupted
   re-save (.replaced-iteration_N-*) goes back to iteration_N when that
   name is free, then the other leftovers of failed saves (.tmp-*,
   .trash-*, .replaced-*, tracker temporaries) are removed.  Takes the
   lock as shs_checkpoint_remove does, so it refuses (SHS_ELOCKED) while a
   trainer saves there.  A save path that does not exist: SHS_OK. */
SHS_API int shs_checkpoint_clean(const char *save_path);

/*
 * One writer per save path.  A manager that saves (enable_save true,
 * load_only false) locks its save path at create, on rank 0 of its comm
 * for the whole job, and unlocks it at free; the kernel releases the lock
 * when the process dies, however it dies.  The lock is an OFD lock
 * (fcntl F_OFD_SETLK) on the file <save_path>/.shardsafe.lock, which is
 * created when missing and never deleted; it holds the holder's pid, host
 * name and start time (ISO 8601 UTC).  A second manager on the same save
 * path -- another job, or another manager of the same process -- fails at
 * create with SHS_ELOCKED and a message naming the holder.  A tool that
 * deletes from a save path (prune) should hold the same lock while it
 * does, with shs_savepath_lock().  On network file systems the
 * lock works where the file system implements POSIX byte-range locks
 * across hosts (docs/checkpoint.md, "One writer per save path").
 */
#define SHS_SAVEPATH_LOCK_NAME ".shardsafe.lock"

typedef struct shs_lock shs_lock;

/* Take the lock of an existing save path without waiting.  SHS_ELOCKED
   (message naming the holder) when another holder has it; SHS_ENOENT when
   the save path does not exist; SHS_EUNSUPPORTED when its file system has
   no locks (NFSv3 without lockd, Lustre without -o flock).  On failure
   *out is NULL. */
SHS_API int shs_savepath_lock(shs_lock **out, const char *save_path);
/* Release the lock (the lock file stays).  NULL is a no-op. */
SHS_API void shs_lock_free(shs_lock *lock);

/* Who holds a save path's lock, as its lock file says.  Fixed-size
   fields, so nothing to free; text from the file is reduced to printable
   ASCII. */
typedef struct shs_lock_holder {
    int held;       /* 1: some process holds the lock now */
    int64_t pid;    /* from the lock file; -1 unknown */
    char host[256]; /* "" unknown */
    char since[32]; /* e.g. "2026-03-01T12:00:00Z"; "" unknown */
    char text[512]; /* "pid 1234 on host h since 2026-...", for
                              messages ("an unknown process" if unknown) */
} shs_lock_holder;

/* Fill *out for `save_path` without taking the lock.  A save path or lock
   file that does not exist is not locked (held 0, SHS_OK).  A lock file
   whose holder died is not held, though its details still name him. */
SHS_API int shs_savepath_lock_holder(shs_lock_holder *out, const char *save_path);

/* Why `name` is not a file name that a checkpoint's metadata.json, a
   MindSpore metadata.json or a Hugging Face index may name, or NULL when
   it is one: a plain name in the same folder -- not empty, no '/' (no
   path, no '..'), no backslash, no control character, not starting with
   '.', at most 255 bytes.  The one rule of the loader, merge and the CLI.
   The text ("is an absolute path", "escapes the folder ('..')", ...) is
   static. */
SHS_API const char *shs_file_name_problem(const char *name);

/* ------------------------------------------------------------------------
 * Merge: complete tensors in the Hugging Face layout.
 * ---------------------------------------------------------------------- */
/*
 * shs_merge() reads every selected tensor of a checkpoint (any source
 * shs_checkpoint_open accepts: a save path, a step directory saved by any
 * number of ranks, with or without remove_redundancy, an HF folder...)
 * through the public read API (checksummed) and writes the complete
 * tensors in the Hugging Face layout into the directory `dst_dir`:
 * "model.safetensors" when everything fits in one file, else
 * "model-00001-of-0000N.safetensors"... plus "model.safetensors.index.json"
 * ({"metadata": {"total_parameters": P, "total_size": N}, "weight_map":
 * {...}}, sorted keys, indent 2, trailing newline: what transformers
 * writes).  Every file has `__metadata__` {"format": "pt"} and is
 * byte-identical to what the reference writer produces for the same
 * tensors.
 *
 * Which tensor goes to which file: the selected tensors, sorted by their
 * output name (bytewise), are packed in that order; a file is closed when
 * the next tensor would take it past max_shard_size.  A tensor larger
 * than max_shard_size gets a file of its own: with the default grouping
 * (SHS_MERGE_GROUPING_CURRENT, huggingface_hub's) that file comes next
 * and the open file stays open for the tensors after it; with
 * SHS_MERGE_GROUPING_LEGACY (transformers < 4.42) it closes the open file
 * and the index has no "total_parameters".
 *
 * Streaming: each output tensor is written box by box (rows, or pieces of
 * rows) through shs_writer_write_part from a fixed buffer per job, so
 * memory does not grow with the tensors or the checkpoint.  Source files
 * are read with pread, never mapped.  (A sub-byte tensor, F4/F6_*, whose
 * last dimension is not whole bytes cannot be read: an error names it.)
 *
 * Atomic: the output is built in a temporary sibling "<dst_dir>.tmp-*"
 * and renamed into place at the end; on any failure (a damaged chunk, a
 * full disk, cancellation) nothing is left behind (with SHS_MERGE_FSYNC,
 * a failed fsync of the parent directory after the rename is reported
 * with the complete output in place).  An existing dst_dir
 * is refused (SHS_EINVAL) unless SHS_MERGE_FORCE, which replaces it only
 * when it holds nothing but the files of an earlier merge.
 *
 * Splitting across machines: with part_count N > 0, the call writes only
 * part `part_index` (0..N-1) of the files -- files are spread over the
 * parts by bytes, largest first -- into "<dst_dir>.part-I-of-N"; once
 * every part is done, shs_merge_finish() (same src and options) checks
 * the parts' files against the plan, gathers them into dst_dir and writes
 * the index.  All parts must see the same checkpoint and options.
 *
 * Errors name the tensor, file or option: an include/exclude glob that
 * matches no tensor, a selection that is empty, rename rules that send
 * two tensors to one name, a part out of range (SHS_EINVAL); a damaged
 * source (SHS_ECHECKSUM / SHS_ECORRUPT naming the file).
 */
enum {
    SHS_MERGE_FORCE = 1u << 0,          /* replace an existing dst_dir
                                           (or part directory) that holds
                                           only an earlier merge's files */
    SHS_MERGE_WITH_OPTIMIZER = 1u << 1, /* optimizer tensors too (default:
                                           model tensors only) */
    SHS_MERGE_FSYNC = 1u << 2           /* fsync files and directories */
};

/* Progress: bytes written so far of `total` (this call's share).  Called
   from the merging threads, one call at a time.  A nonzero return
   cancels the merge (SHS_ESTATE, "cancelled"), leaving nothing behind. */
typedef int (*shs_merge_progress_fn)(void *ctx, uint64_t done, uint64_t total);

typedef struct shs_merge_opts {
    unsigned version; /* SHS_MERGE_OPTS_VERSION */
    unsigned flags;   /* SHS_MERGE_* */
    /* bytes per output file; 0: 5 GB (5e9, transformers' "5GB") */
    uint64_t max_shard_size;
    /* SHS_DTYPE_NONE: keep every dtype; else the dtype that
       floating-point tensors are converted to (round to nearest even;
       export_dtype); other tensors are copied */
    shs_dtype dtype;
    /* n_include globs (fnmatch, '*' matches '.' too) on source names: a
       tensor is selected when it matches one of them (none: every
       tensor) and none of the n_exclude globs */
    const char *const *include;
    size_t n_include;
    const char *const *exclude;
    size_t n_exclude;
    /* "FROM=TO" rules, applied in order, each to the name the previous
       one left: every occurrence of the substring FROM (non-empty) is
       replaced by TO */
    const char *const *rename;
    size_t n_rename;
    int jobs;                       /* threads reading and writing at once, 1 to 1024 (0: 1) */
    int part_index;                 /* with part_count > 0: this part, 0-based */
    int part_count;                 /* 0: the whole output */
    int64_t step;                   /* as shs_checkpoint_open_opts.step (-1: latest) */
    shs_merge_progress_fn progress; /* may be NULL */
    void *progress_ctx;
    /* version 2: the key of an encrypted checkpoint (SHS_KEY_BYTES bytes,
       as shs_checkpoint_open_opts.key; NULL: none, and an encrypted source
       fails with SHS_EKEY "key required").  The merged files are the
       plain Hugging Face layout: they are NOT encrypted. */
    const unsigned char *key;
    size_t key_len;
    /* version 3: which tensors go to which file (SHS_MERGE_GROUPING_*):
       CURRENT (0, the default) is what huggingface_hub >= 0.21 and
       transformers >= 4.42 write, plus "total_parameters" in the index
       as transformers >= 4.53; LEGACY what transformers < 4.42 wrote
       (docs/merge.md) */
    int grouping;
    /* version 3: a MindSpore strategy file (src_strategy_file: the
       protobuf ParallelStrategyMap, docs/merge.md): `src` is then a
       folder of rank_0, rank_1, ... folders, each holding that rank's
       slices in one .safetensors file, laid out as the file says.
       NULL: `src` is any checkpoint shs_checkpoint_open accepts. */
    const char *src_strategy_file;
} shs_merge_opts;
#define SHS_MERGE_OPTS_VERSION 3
#define SHS_MERGE_OPTS_INIT                                                                        \
    {                                                                                              \
        SHS_MERGE_OPTS_VERSION, 0, 0, SHS_DTYPE_NONE, NULL, 0, NULL, 0, NULL, 0, 1, 0, 0, -1,      \
            NULL, NULL, NULL, 0, 0, NULL                                                           \
    }
/* shs_merge_opts.grouping */
enum {
    SHS_MERGE_GROUPING_CURRENT = 0,
    SHS_MERGE_GROUPING_LEGACY = 1
};

/* What a merge did (initialise with SHS_MERGE_RESULT_INIT). */
typedef struct shs_merge_result {
    unsigned version;       /* SHS_MERGE_RESULT_VERSION */
    size_t n_tensors;       /* tensors of the whole output */
    size_t n_files;         /* safetensors files of the whole output */
    uint64_t total_size;    /* their tensor bytes (the index's total_size) */
    size_t files_written;   /* files this call wrote (or gathered) */
    uint64_t bytes_written; /* tensor bytes this call wrote */
} shs_merge_result;
#define SHS_MERGE_RESULT_VERSION 1
#define SHS_MERGE_RESULT_INIT                                                                      \
    {                                                                                              \
        SHS_MERGE_RESULT_VERSION, 0, 0, 0, 0, 0                                                    \
    }

/* Merge `src` into `dst_dir` (see above).  `opts` and `result` may be
   NULL. */
SHS_API int shs_merge(shs_merge_result *result, const char *src, const char *dst_dir,
                      const shs_merge_opts *opts);

/* Final step of a split merge: opts->part_count parts, each written by
   shs_merge with the same src and options, are checked (every file
   present, its tensors those of the plan) and gathered into dst_dir
   (hard links, then the part directories are removed), and the index is
   written.  A missing part directory: SHS_ENOENT naming it. */
SHS_API int shs_merge_finish(shs_merge_result *result, const char *src, const char *dst_dir,
                             const shs_merge_opts *opts);

/* Parse a size: a decimal number of bytes, optionally followed by a unit
   KB, MB, GB, TB (powers of 1000, as transformers) or KiB, MiB, GiB, TiB
   (powers of 1024), any case, e.g. "5GB", "500MiB", "1000000".  Zero,
   junk or overflow: SHS_EINVAL naming the text. */
SHS_API int shs_parse_size(uint64_t *out, const char *text);

/* ------------------------------------------------------------------------
 * Offline reshard.
 * ---------------------------------------------------------------------- */
/*
 * Rewrite a checkpoint for another layout, offline: the output is an
 * ordinary step directory (metadata.json, one model file and one opt file
 * per rank, common.json, rank-local blobs, checksums) whose chunks are
 * exactly the target layout's boxes, so a job on the target world size
 * loads it without resharding (every rank reads only its own chunks).
 *
 * The target layout (docs/reshard.md) is a JSON document
 *   {"world_size": W, "tensors": {NAME or GLOB: SPEC, ...}}
 * where SPEC is one of
 *   {"device_matrix": [..], "tensor_map": [..], "rank_list": [..]}
 *       MindSpore's vocabulary (tensor_map value m: mesh axis
 *       len(device_matrix)-1-m, -1 not split, a list: several axes;
 *       rank_list defaults to 0..prod(device_matrix)-1);
 *   {"split_dim": d, "ranks": N}   dim d split evenly over N ranks, rank r
 *       holding slice r % N (N divides W; "ranks" defaults to W);
 *   {"replicated": true}           the whole tensor on every rank;
 *   {"boxes": [{"rank": r, "offset": [..], "shape": [..]}, ..]}
 *       explicit boxes (equal boxes on several ranks are replicas).
 * An exact name wins over globs (fnmatch(3): * ? [..]), else the first
 * glob in the document that matches.  Every save records the layout it
 * was saved with in metadata.json in this vocabulary ("layouts"); a NULL
 * `layout_path` uses it (derived from the chunks for older checkpoints).
 *
 * Errors (nothing is left behind: the output is built in a temporary
 * sibling of `dst`, renamed to `dst` at the end): `dst` exists
 * (SHS_EINVAL), a tensor the layout does not cover, a split that does not
 * divide a dimension, boxes that do not tile a tensor, a name the
 * checkpoint does not hold, a glob that matches nothing, a malformed
 * layout (SHS_EINVAL naming the tensor or the key), any read error of the
 * source (checksums are checked).  Memory: the largest target rank's share
 * of the tensors at a time.
 */
typedef struct shs_reshard_opts {
    unsigned version;   /* SHS_RESHARD_OPTS_VERSION */
    int world_size;     /* > 0: the target world size; a layout describing
                           another one is scaled to it (the product of the
                           mesh axes that split a tensor changes, its
                           replication stays; "TP 4 -> 2"); 0: the
                           layout's own */
    int64_t step;       /* source save path: this step; -1 the newest */
    const char *prefix; /* output file name prefix; NULL: "checkpoint" */
    int fsync;          /* nonzero: make the output durable (1) */
    /* version 2: the key of an encrypted source (SHS_KEY_BYTES bytes;
       NULL: none, and an encrypted source fails with SHS_EKEY "key
       required").  The output of an encrypted source is encrypted with
       the same key (fresh salts, a new save id); a key given for an
       unencrypted source fails with SHS_EKEY "not encrypted" (as
       shs_checkpoint_open_opts.key). */
    const unsigned char *key;
    size_t key_len;
    /* version 3: the target layout from a MindSpore strategy file (the
       protobuf ParallelStrategyMap of strategy_ckpt_save_file, the
       dst_strategy_file of MindSpore's transform; docs/reshard.md)
       instead of `layout_path` (give one or the other).  Its parameters
       are matched by name; a tensor it does not name is replicated
       (MindSpore's rule); names it has that the checkpoint lacks are
       ignored.  The world is the file's devices (pipeline stages x the
       devices of a stage), unless world_size scales it. */
    const char *strategy_file;
    /* version 3, with strategy_file: the rank of each device of the file
       (device p of stage s is s*N + p), a permutation of 0..W-1; NULL:
       device k is rank k */
    const int *rank_list;
    size_t n_rank_list;
} shs_reshard_opts;
#define SHS_RESHARD_OPTS_VERSION 3
#define SHS_RESHARD_OPTS_INIT                                                                      \
    {                                                                                              \
        SHS_RESHARD_OPTS_VERSION, 0, -1, NULL, 1, NULL, 0, NULL, NULL, 0                           \
    }

typedef struct shs_reshard_result {
    unsigned version;       /* SHS_RESHARD_RESULT_VERSION */
    int world_size;         /* of the output */
    int saved_world_size;   /* of the source */
    int64_t step;           /* of both */
    size_t n_tensors;       /* tensors written */
    uint64_t bytes_read;    /* tensor bytes read from the source */
    uint64_t bytes_written; /* tensor bytes written (each replica counted) */
    size_t blobs_carried;   /* rank-local blobs copied (rank < world_size) */
    size_t blobs_dropped;   /* blobs of ranks >= world_size, not copied */
    int scaled;             /* the layout was scaled to world_size */
    int layout_recorded;    /* no layout_path: 1 the recorded layout was
                              used, 0 it was derived from the chunks */
} shs_reshard_result;
#define SHS_RESHARD_RESULT_VERSION 1
#define SHS_RESHARD_RESULT_INIT                                                                    \
    {                                                                                              \
        SHS_RESHARD_RESULT_VERSION, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0                                  \
    }

/* Reshard checkpoint `src` (anything shs_checkpoint_open accepts) into
   the new step directory `dst` for the layout in the JSON file
   `layout_path` (NULL: the source's own layout).  `opts` may be NULL (the
   defaults); `out` may be NULL. */
SHS_API int shs_reshard(shs_reshard_result *out, const char *src, const char *dst,
                        const char *layout_path, const shs_reshard_opts *opts);

/* The layout `src` was saved with, as a layout document (the format
   above): the recorded one, else derived from its chunks.  *out is a
   NUL-terminated JSON text to release with shs_free. */
SHS_API int shs_reshard_saved_layout(char **out, const char *src, int64_t step);

/* ---- leftovers of killed merges and reshards ---- */

/* shs_merge and shs_reshard build their output in a temporary directory
   beside the destination ("DST.tmp-*", "DST.part-I-of-N.tmp-*",
   ".tmp-<name of DST>-*"), locked by the running process (a lock file
   beside it, "<tmp>.lock"; the kernel releases the lock when the process
   dies).  A run killed mid-way leaves it, full size: the next shs_merge
   or shs_reshard of the same destination removes it, and
   shs_tool_leftovers lists (or removes) them.  docs/merge.md. */
typedef struct shs_tool_leftover {
    unsigned version; /* SHS_TOOL_LEFTOVER_VERSION */
    const char *path; /* the temporary directory (or a stale lock file) */
    const char *tool; /* "merge" or "reshard" */
    uint64_t bytes;   /* bytes of its files */
    uint64_t files;   /* its files */
    int live;         /* a running process holds it: not a leftover */
    long long pid;    /* the pid its lock file records; 0 unknown */
    int removed;      /* shs_tool_leftovers with remove: it was removed */
} shs_tool_leftover;
#define SHS_TOOL_LEFTOVER_VERSION 1
typedef int (*shs_tool_leftover_fn)(void *ctx, const shs_tool_leftover *leftover);

/* Call fn (may be NULL) for every temporary output of a merge or reshard
   of destination `dst` (which need not exist); with `remove` nonzero,
   the leftovers of killed runs are removed first (live ones never) and
   reported with `removed` set.  fn's pointers are valid during the call;
   a nonzero return from fn stops the walk and is returned. */
SHS_API int shs_tool_leftovers(const char *dst, int remove, shs_tool_leftover_fn fn, void *ctx);
/* Release what shs_reshard_saved_layout returned.  NULL is a no-op. */

/* The layout document (the format above) that the MindSpore strategy file
   `path` describes (see shs_reshard_opts.strategy_file; `rank_list` as
   there, may be NULL): per parameter device_matrix and tensor_map, the
   optimizer shard (opt_weight_shard_size/step) as a further split of the
   first dimension, the pipeline stages of a merged file as rank_list.  A
   file that is not a valid ParallelStrategyMap, or describes an
   impossible layout, is SHS_EINVAL naming the file and the problem; a
   field split or a manual param_split_shape SHS_EUNSUPPORTED.  Release
   *out with shs_free. */
SHS_API int shs_strategy_layout(char **out, const char *path, const int *rank_list,
                                size_t n_rank_list);

#ifdef __cplusplus
}
#endif
#endif /* SHARDSAFE_H */
