/* data.h - ptdp's data pipeline: the GPT-2 byte-level BPE tokenizer, Megatron
 * indexed datasets (PREFIX.bin / PREFIX.idx, layout in docs/formats.md), Megatron's
 * preprocessing (JSON lines or plain text -> indexed dataset) and GPT sample
 * indexing with train/valid/test splits and blending.
 *
 * Not here: sentence splitting, tokenizers other than GPT-2 BPE, special-token
 * parsing inside text (like Megatron's GPT2BPETokenizer, "<|endoftext|>" in
 * input text is encoded as ordinary characters), and numpy-identical shuffles
 * (sample indices follow Megatron's GPTDataset semantics but the permutations
 * come from ptdp's counter-based RNG, so they differ from numpy's).
 *
 * Uses base only. Every function returning int returns PTDP_OK or a negative
 * PTDP_E* code after recording a message (ptdp_last_error()). */
#ifndef PTDP_DATA_H
#define PTDP_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- growable token buffer ------------------------------------------------ */
/* Owned by the caller; ptdp_tokens_free releases ids. Zero-initialise to start. */
typedef struct {
    int32_t *ids;
    size_t n;
    size_t cap;
} ptdp_tokens;

/* Ensures room for `extra` more ids. PTDP_ENOMEM on failure. */
int ptdp_tokens_reserve(ptdp_tokens *t, size_t extra);
void ptdp_tokens_free(ptdp_tokens *t);

/* ---- GPT-2 byte-level BPE tokenizer --------------------------------------- */
#define PTDP_GPT2_EOD 50256

typedef struct ptdp_tokenizer ptdp_tokenizer;
/* Per-thread word -> tokens cache (optional; ~1.4x faster encoding on prose). */
typedef struct ptdp_tok_cache ptdp_tok_cache;

/* Loads encoder.json/vocab.json (JSON object string -> id) and vocab.bpe /
 * merges.txt (a "#version" first line is skipped; one "A B" merge per line,
 * rank = order). Errors: PTDP_EIO (cannot read, message names the file),
 * PTDP_EFORMAT (bad JSON, a merge whose parts are not in the vocabulary, ...).
 * On success *out is owned by the caller (ptdp_tokenizer_free). The tokenizer
 * is immutable after open and may be shared by threads. */
int ptdp_tokenizer_open(ptdp_tokenizer **out, const char *vocab_path, const char *merges_path);
/* The same on the two files' bytes already in memory (vocab[vocab_len],
 * merges[merges_len], neither NUL-terminated necessarily); the names stand for
 * the paths in messages. Ids are at most 2^24 - 1. Errors: PTDP_EFORMAT,
 * PTDP_ENOMEM. */
int ptdp_tokenizer_open_mem(ptdp_tokenizer **out, const char *vocab, size_t vocab_len,
                            const char *vocab_name, const char *merges, size_t merges_len,
                            const char *merges_name);
void ptdp_tokenizer_free(ptdp_tokenizer *tok); /* NULL is a no-op */
/* Number of ids in the vocabulary (max id + 1); 50257 for GPT-2. */
int32_t ptdp_tokenizer_vocab_size(const ptdp_tokenizer *tok);
/* Id of "<|endoftext|>", or -1 when the vocabulary has none. */
int32_t ptdp_tokenizer_eod(const ptdp_tokenizer *tok);

/* A cache for one thread. NULL on allocation failure; the caller frees it. */
ptdp_tok_cache *ptdp_tok_cache_new(void);
void ptdp_tok_cache_free(ptdp_tok_cache *c); /* NULL is a no-op */

/* Appends the ids of text[0..len) to *out. Any byte sequence is accepted:
 * bytes that are not valid UTF-8 are each treated as one code point of
 * category "other", and every byte is encoded (decode gives it back).
 * `cache` may be NULL. Errors: PTDP_ENOMEM. */
int ptdp_tokenizer_encode(const ptdp_tokenizer *tok, ptdp_tok_cache *cache, const char *text,
                          size_t len, ptdp_tokens *out);

/* Appends the bytes of ids[0..n) to *buf (*buf realloc'ed, caller frees;
 * len and cap track it, start from NULL, 0, 0). Errors: PTDP_EINVAL for an id
 * outside the vocabulary (message names it), PTDP_ENOMEM. */
/* Parses one line of `ptdp tokenize --decode`: decimal ids separated by
 * spaces, tabs or CR, text[len] (not NUL-terminated; a NUL byte is an
 * error), each in 0..vocab_size-1; appends them to out. Errors: PTDP_EINVAL
 * "'WORD' is not a token id (0..V-1)", PTDP_ENOMEM. */
int ptdp_tokens_parse_ids(const char *text, size_t len, int32_t vocab_size, ptdp_tokens *out);
int ptdp_tokenizer_decode(const ptdp_tokenizer *tok, const int32_t *ids, size_t n, char **buf,
                          size_t *len, size_t *cap);

/* ---- Megatron indexed dataset --------------------------------------------- */
#define PTDP_IDX_DTYPES(X)           \
    X(PTDP_IDX_U8, 1, 1, "uint8")    \
    X(PTDP_IDX_I8, 2, 1, "int8")     \
    X(PTDP_IDX_I16, 3, 2, "int16")   \
    X(PTDP_IDX_I32, 4, 4, "int32")   \
    X(PTDP_IDX_I64, 5, 8, "int64")   \
    X(PTDP_IDX_F64, 6, 8, "float64") \
    X(PTDP_IDX_F32, 7, 4, "float32") \
    X(PTDP_IDX_U16, 8, 2, "uint16")

enum {
#define PTDP__IDX_ENUM(name, code, size, str) name = code,
    PTDP_IDX_DTYPES(PTDP__IDX_ENUM)
#undef PTDP__IDX_ENUM
};

/* Element size of a dtype code, 0 for an unknown code. */
int ptdp_idx_dtype_size(int code);
const char *ptdp_idx_dtype_name(int code); /* "?" for unknown */
/* Megatron's choice: uint16 when vocab_size < 65500, else int32. */
int ptdp_idx_dtype_for_vocab(int64_t vocab_size);

typedef struct ptdp_idx_writer ptdp_idx_writer;

/* Writes PREFIX.bin.tmp.PID now and PREFIX.idx.tmp.PID in finish, which
 * then renames both over PREFIX.{bin,idx}: a failed or abandoned writer
 * leaves an existing dataset at PREFIX untouched. dtype: U16 or
 * I32 (others PTDP_EUNSUPPORTED). Errors: PTDP_EIO naming the file. */
int ptdp_idx_writer_open(ptdp_idx_writer **out, const char *prefix, int dtype);
/* Adds one document made of one sequence of n tokens (n == 0: an empty
 * document: no sequence, the boundary count repeats, as in Megatron).
 * Errors: PTDP_EINVAL (a token does not fit the dtype), PTDP_EIO. */
int ptdp_idx_writer_add_document(ptdp_idx_writer *w, const int32_t *tokens, size_t n);
/* Writes PREFIX.idx and closes both files. The writer is freed whether or
 * not it succeeds. Errors: PTDP_EIO. */
int ptdp_idx_writer_finish(ptdp_idx_writer *w);
/* Abandons a writer, removing its temporary files. NULL is a no-op. */
void ptdp_idx_writer_free(ptdp_idx_writer *w);

typedef struct ptdp_idx_dataset ptdp_idx_dataset;

/* Maps PREFIX.idx and PREFIX.bin read-only and validates them: magic,
 * version 1, dtype code, that the .idx size matches S and D, lengths >= 0,
 * pointers contiguous from 0, document boundaries from 0 non-decreasing to S,
 * and the .bin size. Errors: PTDP_EIO (missing/unreadable), PTDP_EFORMAT (the
 * message names the file and the problem). *out owned by the caller. */
int ptdp_idx_open(ptdp_idx_dataset **out, const char *prefix);
/* The same validation on the two files' bytes in memory (they must outlive
 * *out, which neither copies nor frees them); `prefix` names them in
 * messages. Errors: PTDP_EFORMAT, PTDP_ENOMEM. */
int ptdp_idx_open_mem(ptdp_idx_dataset **out, const char *prefix, const void *idx, size_t idx_size,
                      const void *bin, size_t bin_size);
void ptdp_idx_close(ptdp_idx_dataset *ds); /* NULL is a no-op */
int64_t ptdp_idx_num_sequences(const ptdp_idx_dataset *ds);
/* Number of documents (D - 1). */
int64_t ptdp_idx_num_documents(const ptdp_idx_dataset *ds);
int ptdp_idx_dtype(const ptdp_idx_dataset *ds);
int32_t ptdp_idx_sequence_length(const ptdp_idx_dataset *ds, int64_t seq);
/* Boundary j (0 <= j <= num_documents): index of document j's first sequence. */
int64_t ptdp_idx_document_index(const ptdp_idx_dataset *ds, int64_t j);
/* Copies tokens [offset, offset+count) of sequence `seq` to dst as int32.
 * Errors: PTDP_EINVAL for an out-of-range request or a float dtype. */
int ptdp_idx_read(const ptdp_idx_dataset *ds, int64_t seq, int64_t offset, int64_t count,
                  int32_t *dst);
const char *ptdp_idx_prefix(const ptdp_idx_dataset *ds);

/* ---- preprocessing (tools/preprocess_data.py) ------------------------------- */
#define PTDP_PP_MAX_KEYS 16
typedef struct {
    const char *input; /* JSON lines or plain text, see format */
    int format;        /* PTDP_PP_AUTO (default): JSON lines when the name ends in .json/.jsonl
                          or the first non-blank line starts with '{', else plain text;
                          PTDP_PP_JSON, PTDP_PP_TEXT: as told */
    const char *output_prefix; /* writes OUTPUT_PREFIX_KEY_document.{bin,idx} per key */
    const char *json_keys[PTDP_PP_MAX_KEYS]; /* JSON lines: one dataset per key ("text") */
    int n_keys;                              /* >= 1; plain text: 1 (its name: the prefix) */
    int64_t log_interval; /* > 0: a line every this many documents (Megatron's) */
    int append_eod;       /* append the EOD id to every non-empty document */
    int workers;          /* threads tokenizing; output does not depend on it */
    int progress;         /* 1: progress bar on stderr; 0: one summary line */
} ptdp_preprocess_params;

enum { PTDP_PP_AUTO = 0, PTDP_PP_JSON = 1, PTDP_PP_TEXT = 2 };
ptdp_preprocess_params ptdp_preprocess_default_params(void);

typedef struct {
    int64_t documents;
    int64_t empty_documents;
    int64_t tokens;
    int64_t bytes_in;
    double seconds;
} ptdp_preprocess_stats;

/* Runs the whole conversion. Errors: PTDP_EIO (input/output files, message
 * names the file), PTDP_EFORMAT (a JSON line that does not parse, or lacks a
 * string under the key: message gives file:line), PTDP_ENOMEM. stats may be NULL. */
int ptdp_preprocess_run(const ptdp_tokenizer *tok, const ptdp_preprocess_params *p,
                        ptdp_preprocess_stats *stats);

/* ---- GPT sample indexing (megatron/core/datasets/gpt_dataset.py) ------------ */
enum { PTDP_SPLIT_TRAIN = 0, PTDP_SPLIT_VALID = 1, PTDP_SPLIT_TEST = 2, PTDP_NUM_SPLITS = 3 };

#define PTDP_DATA_MAX_PATHS 64

typedef struct {
    int num_paths;                       /* >= 1 */
    double weights[PTDP_DATA_MAX_PATHS]; /* ignored when num_paths == 1 or by_size */
    int by_size; /* weigh each dataset's split by its samples in one epoch (a list of prefixes
                    without weights, as Megatron's unweighted blends) */
    const char *prefixes[PTDP_DATA_MAX_PATHS]; /* PREFIX of PREFIX.bin/.idx */
    const char *split;                         /* e.g. "949,50,1"; NULL = "969,30,1" */
    int64_t seq_length;                        /* s: a sample holds s+1 tokens */
    uint64_t seed;
    int64_t num_samples[PTDP_NUM_SPLITS]; /* samples needed per split (0: one epoch
                                             for a single path, none when blending) */
    int64_t vocab_size;                   /* every token must be < this; 0 = no check */
} ptdp_gpt_data_params;

ptdp_gpt_data_params ptdp_gpt_data_default_params(void);

/* Parses a Megatron --data-path list: "PREFIX", "P1 P2 ..." (blended by
 * size: p->by_size) or "W1 P1 W2 P2 ...".
 * argv entries are borrowed (p->prefixes point into them). Errors:
 * PTDP_EINVAL naming the bad entry. */
int ptdp_gpt_data_parse_paths(ptdp_gpt_data_params *p, int argc, char **argv);

typedef struct ptdp_gpt_data ptdp_gpt_data;

/* Opens every dataset, splits its sequences (= documents for preprocessed
 * text) by `split`, builds the document, sample and shuffle indices of each
 * split and the blending index. Everything is a pure function of the params:
 * sample i of a split is the same in every process and after a restart.
 * Errors: PTDP_EIO/PTDP_EFORMAT from the files, PTDP_EINVAL (bad split
 * string, weights, seq_length < 1, token >= vocab_size naming file and
 * sequence), PTDP_ECONFIG (samples requested from a split that has no
 * tokens), PTDP_ENOMEM. *out is owned by the caller. Local: every rank opens
 * the files itself and gets the same result from the same files; when a
 * rank cannot (a file missing on one node) the others do not learn it (agree
 * before the next collective, as ptdp_run_setup does). */
int ptdp_gpt_data_open(ptdp_gpt_data **out, const ptdp_gpt_data_params *p);
/* Number of samples in a split (0 if it has none). */
int64_t ptdp_gpt_data_num_samples(const ptdp_gpt_data *d, int split);
/* Writes the s+1 tokens of sample idx (wrapped modulo the split's count).
 * Thread-safe (read-only). Errors: PTDP_EINVAL for an empty split. */
int ptdp_gpt_data_sample(const ptdp_gpt_data *d, int split, int64_t idx, int32_t *tokens);
void ptdp_gpt_data_free(ptdp_gpt_data *d); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif

#endif
