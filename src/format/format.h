/* format.h - the one public header of src/format: file formats that know
 * nothing of models. The safetensors container (read and written), CRC-32,
 * and the file primitives checkpoints and exports are made of (atomic
 * writes, mkdir -p, fsync of a directory). PyTorch's torch.save container
 * (zip + pickle) is format/torch.h, which is not installed: only the
 * Megatron-LM mapping (src/ckpt/megatron) and the tests use it. The byte
 * layouts are in docs/formats.md.
 *
 * Not here: anything that knows a parameter name, a model shape or a
 * parallel layout (src/ckpt). Uses base and cJSON only. */
#ifndef PTDP_FORMAT_H
#define PTDP_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== safetensors ========================================================= */
/* Safetensors: reading and writing the safetensors format (Hugging Face's
 * checkpoint container), the format ptdp's checkpoints, imports/exports and
 * golden test fixtures use.
 *
 * Byte layout (docs/formats.md):
 *   u64 little-endian N | N bytes UTF-8 JSON header, space padded | data buffer
 *   header = {"__metadata__":{"format":"pt",...},
 *             "NAME":{"dtype":"F32","shape":[d0,...],"data_offsets":[BEGIN,END]}, ...}
 *   offsets are relative to the data buffer, END exclusive; data is
 *   little-endian and row-major.
 *
 * The reader maps the whole file and validates everything before returning:
 * header length <= 100,000,000 and inside the file; the header is one JSON
 * object; every entry has a known dtype, a shape of at most 8 non-negative
 * dims and two data_offsets; END - BEGIN = prod(shape) * sizeof(dtype); the
 * entries sorted by offset tile the buffer from 0 with no hole or overlap;
 * 8 + N + last END = file size; no duplicate names; __metadata__ maps strings
 * to strings. Every error message names the file and what is wrong.
 *
 * Deliberately not here: sharded checkpoints (model.safetensors.index.json),
 * tensor-parallel slicing, UTF-8 validation of names, big-endian hosts (the
 * data pointers hand out little-endian bytes as they are in the file). */

/* dtypes: X(enum suffix, name in the header, bytes per element) */
#define PTDP_ST_DTYPES(X) \
    X(F64, "F64", 8)      \
    X(F32, "F32", 4)      \
    X(F16, "F16", 2)      \
    X(BF16, "BF16", 2)    \
    X(I64, "I64", 8)      \
    X(I32, "I32", 4)      \
    X(U16, "U16", 2)      \
    X(U8, "U8", 1)

typedef enum {
#define PTDP__ST_DT_ENUM(e, name, size) PTDP_ST_##e,
    PTDP_ST_DTYPES(PTDP__ST_DT_ENUM)
#undef PTDP__ST_DT_ENUM
        PTDP_ST_NDTYPES
} ptdp_st_dtype;

/* Header name ("F32") and element size of a dtype; asserts on a bad value. */
const char *ptdp_st_dtype_name(ptdp_st_dtype dt);
size_t ptdp_st_dtype_size(ptdp_st_dtype dt);

#define PTDP_ST_MAX_DIMS 8
#define PTDP_ST_MAX_HEADER 100000000ull

/* One tensor of an open file. Everything points into the file object and
 * lives until ptdp_st_close. `data` is NOT necessarily aligned (a header
 * length that is not a multiple of 8 shifts it): copy with memcpy, or use
 * ptdp_st_read_f32 / ptdp_st_read_i32. */
typedef struct {
    const char *name;
    ptdp_st_dtype dtype;
    int ndim; /* 0 for a scalar */
    int64_t shape[PTDP_ST_MAX_DIMS];
    int64_t numel;    /* prod(shape), 1 for a scalar */
    const void *data; /* nbytes little-endian bytes */
    size_t nbytes;
} ptdp_st_tensor;

typedef struct ptdp_st_file ptdp_st_file;

/* ---- reader --------------------------------------------------------------- */

/* Opens, maps and validates `path`. On success *out owns the mapping (free it
 * with ptdp_st_close). Errors: PTDP_EIO (cannot open/stat/map, errno text),
 * PTDP_EFORMAT (anything docs/formats.md forbids; the message names the file and
 * the problem), PTDP_ENOMEM. On error *out is NULL. Blocks on file I/O; any
 * rank may call it. */
int ptdp_st_open(ptdp_st_file **out, const char *path);
/* The same validation on bytes already in memory (fuzzing, tests): data[size]
 * must outlive *out, which does not copy it; `name` stands for the path in
 * messages. Errors as ptdp_st_open without PTDP_EIO. */
int ptdp_st_open_mem(ptdp_st_file **out, const char *name, const void *data, size_t size);
/* Unmaps and frees; tensors and strings obtained from f die with it. NULL is a
 * no-op. */
void ptdp_st_close(ptdp_st_file *f);

/* Number of tensors, and tensor i (0 <= i < count) in header order. */
int ptdp_st_count(const ptdp_st_file *f);
const ptdp_st_tensor *ptdp_st_get(const ptdp_st_file *f, int i);
/* Tensor by exact name (binary search), or NULL when absent; records no error. */
const ptdp_st_tensor *ptdp_st_find(const ptdp_st_file *f, const char *name);
/* __metadata__ value for key, or NULL when absent. Owned by f. */
const char *ptdp_st_metadata(const ptdp_st_file *f, const char *key);
/* Number of metadata pairs and pair i (in header order); for listing. */
int ptdp_st_metadata_count(const ptdp_st_file *f);
void ptdp_st_metadata_get(const ptdp_st_file *f, int i, const char **key, const char **value);
/* The path the file was opened with. */
const char *ptdp_st_path(const ptdp_st_file *f);

/* Copies tensor `name` into dst[n] as float, converting from F32, BF16, F16
 * or F64. Errors: PTDP_ENOTFOUND (no such tensor), PTDP_EFORMAT (its element
 * count is not n), PTDP_EUNSUPPORTED (an integer dtype). */
int ptdp_st_read_f32(const ptdp_st_file *f, const char *name, float *dst, int64_t n);
/* Same for integers: from I32, I64 (range-checked), U16 or U8 into int32. */
int ptdp_st_read_i32(const ptdp_st_file *f, const char *name, int32_t *dst, int64_t n);

/* ---- writer --------------------------------------------------------------- */

/* Collects tensors and metadata, then writes one file. The header starts with
 * "__metadata__":{"format":"pt", then the added pairs in order}, tensors
 * follow in the order added, packed from offset 0, and the header is space
 * padded to a multiple of 8 so the data is 8-aligned. */
typedef struct ptdp_st_writer ptdp_st_writer;

/* PTDP_ENOMEM on failure (*out NULL). */
int ptdp_st_writer_init(ptdp_st_writer **out);
/* NULL is a no-op. Does not touch the tensor data (the caller owns it). */
void ptdp_st_writer_free(ptdp_st_writer *w);
/* Adds a tensor. `name` and `shape` are copied; `data` (prod(shape) elements
 * of dtype, little-endian) is borrowed and must stay valid until
 * ptdp_st_write returns. Errors: PTDP_EINVAL (empty, duplicate or reserved
 * name "__metadata__", ndim outside 0..8, negative dim, NULL data with
 * non-zero size), PTDP_ENOMEM. */
int ptdp_st_writer_add(ptdp_st_writer *w, const char *name, ptdp_st_dtype dtype, int ndim,
                       const int64_t *shape, const void *data);
/* Adds or replaces a metadata pair (both copied). Key "format" is always
 * "pt": setting it to anything else is PTDP_EINVAL. */
int ptdp_st_writer_meta(ptdp_st_writer *w, const char *key, const char *value);
/* Writes the file atomically: path.tmp.PID, fflush, fsync, rename. On
 * failure the temporary file is removed and PTDP_EIO is returned with the
 * errno text; an existing file at path is left untouched. Blocks on I/O. */
int ptdp_st_write(const ptdp_st_writer *w, const char *path);

/* ==== CRC-32 and file primitives =========================================== */
/* Each returns PTDP_OK or a negative PTDP_E* code with a message naming the
 * path; any rank may call them; they block on file I/O. */

/* CRC-32 (IEEE, reflected 0xEDB88320, init and final xor 0xFFFFFFFF). */
uint32_t ptdp_crc32(uint32_t crc, const void *data, size_t n);
/* CRC-32 and size of a whole file. PTDP_ENOTFOUND when it does not exist,
 * PTDP_EIO, PTDP_ENOMEM. */
int ptdp_file_crc32(const char *path, uint32_t *crc, int64_t *size);
/* mkdir -p: creates dir and its missing parents. PTDP_EIO ("cannot create
 * directory X: why") otherwise. */
int ptdp_file_mkdirs(const char *dir);
/* fsync of a directory, so a rename in it is durable (errors ignored). */
void ptdp_file_fsync_dir(const char *dir);
/* Writes text to path atomically: path.tmp.PID, fsync, rename. On failure
 * the temporary is removed, an existing file at path is left untouched, and
 * PTDP_EIO is returned with the errno text. */
int ptdp_file_write_atomic(const char *path, const char *text);

#ifdef __cplusplus
}
#endif

#endif
