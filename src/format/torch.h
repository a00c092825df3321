/* torch.h - PyTorch's torch.save container: the zip it writes (zip.c), the
 * pickle tree the reader builds (pickle.c), the two together as a
 * torch.save file (torch.c) and the pickle writer (pickle_write.c). Only the
 * Megatron-LM mapping (src/ckpt/megatron), the fuzz harnesses and the tests
 * use it, so it is not installed and keeps the internal prefix. The byte
 * layouts are described in zip.c and pickle.c; docs/megatron.md says what
 * ptdp reads and writes with them. */
#ifndef PTDP_FORMAT_TORCH_H
#define PTDP_FORMAT_TORCH_H

#include <stddef.h>
#include <stdint.h>

#include "format/format.h"

/* ---- zip (zip.c) ---------------------------------------------------------- */

/* One stored (uncompressed) entry: its name and where its bytes are. */
typedef struct {
    char name[256];
    uint64_t offset, size; /* of the data, inside the archive */
    uint32_t crc;          /* from the central directory, checked at open */
} ptdp__zip_entry;

typedef struct {
    const uint8_t *data; /* the whole archive (borrowed, or mapped by open_file) */
    size_t size;
    int mapped;
    ptdp__zip_entry *entries;
    int n;
    char what[512]; /* the path, for messages */
} ptdp__zip;

/* Reads an archive held in memory (borrowed; must outlive z): the end of
 * central directory (zip64 included), every central record, every local
 * header, and the CRC-32 of every entry. Only stored entries (method 0) are
 * accepted, as torch.save writes them. At most 1<<20 entries; names under
 * 256 bytes. Errors: PTDP_EFORMAT naming `what` and the problem. */
int ptdp__zip_open_mem(ptdp__zip *z, const void *data, size_t size, const char *what);
/* Maps `path` read-only and opens it as above; PTDP_EIO when it cannot. */
int ptdp__zip_open_file(ptdp__zip *z, const char *path);
void ptdp__zip_close(ptdp__zip *z);
/* The entry whose name is "<any top folder>/suffix" (torch's archive name
 * is the file's base name, so the folder varies), or NULL. */
const ptdp__zip_entry *ptdp__zip_find(const ptdp__zip *z, const char *suffix);

/* Writer: entries in the order added, each stored, its data aligned to 64
 * bytes (as torch.save does), then the central directory. No zip64: an
 * archive past 4 GiB is refused with a message. */
typedef struct ptdp__zipw ptdp__zipw;
/* Opens path.tmp.PID for writing. PTDP_EIO / PTDP_ENOMEM. */
int ptdp__zipw_open(ptdp__zipw **out, const char *path);
/* Appends entry `name` with n bytes of data. */
int ptdp__zipw_add(ptdp__zipw *w, const char *name, const void *data, size_t n);
/* commit: writes the central directory, fsyncs and renames to the path;
 * !commit (or any failure) removes the temporary. Frees w either way. */
int ptdp__zipw_close(ptdp__zipw *w, int commit);

/* ---- the pickle tree (pickle.c) ------------------------------------------- */

typedef enum {
    PTDP_PK_NONE,
    PTDP_PK_BOOL,
    PTDP_PK_INT,
    PTDP_PK_FLOAT,
    PTDP_PK_STR,    /* unicode, or bytes: s/len */
    PTDP_PK_TUPLE,  /* items[n] */
    PTDP_PK_LIST,   /* items[n] (sets too) */
    PTDP_PK_DICT,   /* items[2n]: key, value, ... (OrderedDict too) */
    PTDP_PK_GLOBAL, /* a class or function reference "module.name": s */
    PTDP_PK_OBJECT, /* anything else: cls, args, state, plus items appended or set on it */
    PTDP_PK_STORAGE,
    PTDP_PK_TENSOR,
} ptdp__pk_kind;

/* torch storage classes: X(enum suffix, class name, element bytes, st dtype or -1) */
#define PTDP__TORCH_DTYPES(X)                   \
    X(F32, "FloatStorage", 4, PTDP_ST_F32)      \
    X(F16, "HalfStorage", 2, PTDP_ST_F16)       \
    X(BF16, "BFloat16Storage", 2, PTDP_ST_BF16) \
    X(F64, "DoubleStorage", 8, PTDP_ST_F64)     \
    X(I64, "LongStorage", 8, PTDP_ST_I64)       \
    X(I32, "IntStorage", 4, PTDP_ST_I32)        \
    X(I16, "ShortStorage", 2, -1)               \
    X(I8, "CharStorage", 1, -1)                 \
    X(U8, "ByteStorage", 1, PTDP_ST_U8)         \
    X(BOOL, "BoolStorage", 1, -1)

typedef enum {
#define PTDP__TD_ENUM(e, name, size, st) PTDP_TD_##e,
    PTDP__TORCH_DTYPES(PTDP__TD_ENUM)
#undef PTDP__TD_ENUM
        PTDP_TD_COUNT
} ptdp__torch_dtype;

#define PTDP_PK_MAX_DIMS 8

typedef struct ptdp__pk_node ptdp__pk_node;
struct ptdp__pk_node {
    ptdp__pk_kind kind;
    int big;       /* PTDP_PK_INT that does not fit int64 (kept, value unusable) */
    int64_t i;     /* BOOL, INT; STORAGE: element count */
    double f;      /* FLOAT */
    const char *s; /* STR, GLOBAL ("module.name"), STORAGE (its key), NUL-terminated */
    int64_t len;
    ptdp__pk_node **items; /* TUPLE/LIST/OBJECT: n; DICT (and OBJECT's set items): 2n */
    int64_t n, cap;
    ptdp__pk_node *cls, *args, *state; /* OBJECT */
    /* STORAGE: dtype; TENSOR: storage, dtype, offset, shape, stride (elements) */
    ptdp__pk_node *storage;
    int dtype, ndim;
    int64_t offset, shape[PTDP_PK_MAX_DIMS], stride[PTDP_PK_MAX_DIMS], numel;
};

typedef struct ptdp__pk ptdp__pk; /* owns every node of one parse */

/* Runs the pickle program data[n] on a small stack machine that builds
 * nodes and never imports or calls anything: GLOBAL only records a name;
 * REDUCE/NEWOBJ build an OBJECT (except torch._utils._rebuild_tensor_v2 and
 * _rebuild_parameter, which build a TENSOR from a storage, and
 * collections.OrderedDict, which builds a DICT); BINPERSID must be torch's
 * ('storage', torch.XStorage, key, location, numel). Bounded: 1<<24 nodes,
 * 1<<22 memo slots, 1 GiB of nodes and strings. *root is owned by *out.
 * Errors: PTDP_EFORMAT "WHAT: pickle byte OFF: ..." naming the opcode, or
 * PTDP_ENOMEM; nothing to free on error. */
int ptdp__pk_parse(ptdp__pk **out, const ptdp__pk_node **root, const void *data, size_t n,
                   const char *what);
void ptdp__pk_free(ptdp__pk *p); /* NULL is a no-op */

/* Lookups on the tree (NULL when absent or not that kind). */
const ptdp__pk_node *ptdp__pk_get(const ptdp__pk_node *dict, const char *key);
/* The LIST of every STORAGE node the parse built (NULL when none), for the
 * torch.save file's checks against the archive. */
const ptdp__pk_node *ptdp__pk_storages(const ptdp__pk *p);
/* An OBJECT's attribute: its BUILD state's dict entry (argparse.Namespace). */
const ptdp__pk_node *ptdp__pk_attr(const ptdp__pk_node *obj, const char *key);
const char *ptdp__torch_dtype_name(int dtype);
size_t ptdp__torch_dtype_size(int dtype);

/* ---- a torch.save file: zip + pickle (torch.c) ---------------------------- */

typedef struct {
    ptdp__zip zip;
    ptdp__pk *pk;
    const ptdp__pk_node *root;
} ptdp__torch_file;

/* Opens a torch.save file (zip with data.pkl and data/KEY storages; the
 * legacy tar/raw-pickle formats are refused with a message) and checks that
 * every storage the pickle names exists with exactly numel x element size
 * bytes. Errors name the path. */
int ptdp__torch_open(ptdp__torch_file *tf, const char *path);
/* The same on a buffer (the fuzz entry point uses it). */
int ptdp__torch_open_mem(ptdp__torch_file *tf, const void *data, size_t n, const char *what);
void ptdp__torch_close(ptdp__torch_file *tf);
/* Copies tensor t (any strides; F32, F16, BF16 or F64) as n floats into dst.
 * PTDP_EFORMAT when its element count is not n, PTDP_EUNSUPPORTED for an
 * integer dtype. */
int ptdp__torch_read_f32(const ptdp__torch_file *tf, const ptdp__pk_node *t, float *dst, int64_t n);

/* ---- the pickle writer (pickle_write.c) ----------------------------------- */

/* A byte buffer of protocol-2 opcodes, built in the order torch.save's
 * pickler emits them for dicts of str -> (int, float, str, bool, None,
 * tensor, Namespace). Errors are sticky: the first failed growth makes
 * ptdp__pkw_finish return PTDP_ENOMEM. */
typedef struct {
    uint8_t *buf;
    size_t len, cap;
    int failed;
    int64_t storages; /* next storage key: "0", "1", ... */
} ptdp__pkw;

void ptdp__pkw_init(ptdp__pkw *w);            /* writes PROTO 2 */
void ptdp__pkw_dict_begin(ptdp__pkw *w);      /* EMPTY_DICT MARK */
void ptdp__pkw_dict_end(ptdp__pkw *w);        /* SETITEMS */
void ptdp__pkw_namespace_begin(ptdp__pkw *w); /* argparse.Namespace() + state dict */
void ptdp__pkw_namespace_end(ptdp__pkw *w);   /* SETITEMS BUILD */
void ptdp__pkw_str(ptdp__pkw *w, const char *s);
void ptdp__pkw_int(ptdp__pkw *w, int64_t v);
void ptdp__pkw_float(ptdp__pkw *w, double v);
void ptdp__pkw_bool(ptdp__pkw *w, int v);
void ptdp__pkw_none(ptdp__pkw *w);
/* A contiguous float32 tensor of shape[ndim] whose storage is the next key
 * ("0", "1", ...): the caller writes the data as entry data/KEY. Returns
 * the key's number. */
int64_t ptdp__pkw_tensor_f32(ptdp__pkw *w, int ndim, const int64_t *shape);
/* STOP; PTDP_OK or PTDP_ENOMEM. The caller frees w->buf. */
int ptdp__pkw_finish(ptdp__pkw *w);

/* ---- fuzzing entry points ------------------------------------------------- */

/* Parse data[n] as a pickle, or as a whole torch.save zip (checking every
 * storage), and free everything. PTDP_OK, or an error with a message; never
 * a crash, whatever the bytes. */
int ptdp_pickle_check(const void *data, size_t n);
int ptdp_torch_check(const void *data, size_t n);

#endif
