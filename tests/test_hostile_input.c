/* test_hostile_input.c - files from untrusted sources cannot escape or
 * exhaust (docs/reliability.md): shard names in a checkpoint manifest stay
 * inside the checkpoint directory ("../", absolute paths, symbolic links out,
 * FIFOs), shape products cannot overflow, header sizes and ids are bounded
 * before anything is allocated, JSON nesting is bounded, numbers outside
 * int64 are refused instead of converted. Each case checks the message too,
 * so the refusal is the one intended and not an accident further on. */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "format/format.h"
#include "data/data.h"
#include "data/data_internal.h"
#include "test.h"
#include "train/train.h"

#define HAS(s) (strstr(ptdp_last_error(), (s)) != NULL)

/* A valid manifest with one file, one [4, 3] tensor and one shard; the
 * arguments replace the file name, the tensor shape, the shard's rows,
 * columns and elements, and the iteration. */
static const char *manifest_text(const char *file, const char *shape, const char *rows,
                                 const char *cols, const char *elems, const char *iter) {
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"format\":\"ptdp-checkpoint\",\"version\":1,\"iteration\":%s,"
             "\"consumed_samples\":1,\"optimizer_step\":1,\"has_optimizer\":false,"
             "\"model\":{\"num_layers\":1,\"hidden_size\":8,\"num_attention_heads\":2,"
             "\"ffn_hidden_size\":32,\"seq_length\":4,\"max_position_embeddings\":4,"
             "\"vocab_size\":16,\"padded_vocab_size\":16},\"training\":{\"seed\":1},"
             "\"layout\":{\"tensor_model_parallel_size\":1,\"pipeline_model_parallel_size\":1,"
             "\"data_parallel_size\":1,\"virtual_pipeline_model_parallel_size\":1,"
             "\"world_size\":1},"
             "\"files\":[{\"name\":\"%s\",\"rank\":0,\"bytes\":104,\"crc32\":\"00000000\"}],"
             "\"tensors\":[{\"name\":\"w\",\"shape\":%s}],"
             "\"shards\":[{\"tensor\":\"w\",\"kind\":\"param\",\"key\":\"param/w\",\"file\":0,"
             "\"rows\":%s,\"cols\":%s,\"elements\":%s}]}",
             iter, file, shape, rows, cols, elems);
    return buf;
}

static int parse(const char *text) {
    manifest M;
    memset(&M, 0, sizeof M);
    snprintf(M.path, sizeof M.path, "test/manifest.json");
    int rc = ptdp__ckpt_manifest_parse(&M, text, strlen(text));
    ptdp__ckpt_manifest_free(&M);
    return rc;
}

static const char *good(void) {
    return manifest_text("rank_00000.safetensors", "[4,3]", "[0,4]", "[0,3]", "[0,12]", "1");
}

static void test_manifest_records(void) {
    CHECK(parse(good()) == 1);
    /* names that would leave the directory, or be ambiguous */
    const char *names[] = {
        "../rank_00000.safetensors",
        "/etc/passwd",
        "a/b",
        "..",
        ".",
        "",
        "x\\\\..\\\\y",
        "tab\\there",
        "a-name-longer-than-the-sixty-four-bytes-a-file-record-keeps.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        CHECK(parse(manifest_text(names[i], "[4,3]", "[0,4]", "[0,3]", "[0,12]", "1")) ==
              PTDP_EFORMAT);
        CHECK(HAS("files[0] needs a plain file name"));
    }
    /* shape products: each dim and the product bounded (2^40) */
    CHECK(parse(manifest_text("f", "[4294967296,4294967296]", "[0,4]", "[0,3]", "[0,12]", "1")) ==
          PTDP_EFORMAT);
    CHECK(HAS("tensors[0] needs a name"));
    CHECK(parse(manifest_text("f", "[0,3]", "[0,0]", "[0,3]", "[0,0]", "1")) == PTDP_EFORMAT);
    CHECK(parse(manifest_text("f", "[-4,3]", "[0,4]", "[0,3]", "[0,12]", "1")) == PTDP_EFORMAT);
    /* ranges: negative, reversed, outside the tensor, more elements than the rectangle */
    const char *ranges[][3] = {{"[-1,4]", "[0,3]", "[0,12]"},   {"[0,4]", "[0,3]", "[-5,12]"},
                               {"[2,1]", "[0,3]", "[0,0]"},     {"[0,5]", "[0,3]", "[0,12]"},
                               {"[0,4]", "[0,0]", "[-5,0]"},    {"[0,4]", "[0,3]", "[0,13]"},
                               {"[0,4]", "[1e300,3]", "[0,12]"}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        CHECK(parse(manifest_text("f", "[4,3]", ranges[i][0], ranges[i][1], ranges[i][2], "1")) ==
              PTDP_EFORMAT);
        CHECK(HAS("shards[0]"));
    }
    /* numbers outside int64 (a cast would be undefined) and fractions */
    CHECK(parse(manifest_text("f", "[4,3]", "[0,4]", "[0,3]", "[0,12]", "1e300")) == PTDP_EFORMAT);
    CHECK(HAS("missing or not an integer"));
    CHECK(parse(manifest_text("f", "[4,3]", "[0,4]", "[0,3]", "[0,12]", "1.5")) == PTDP_EFORMAT);
    /* nesting */
    char deep[400];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    CHECK(parse(deep) == PTDP_EFORMAT && HAS("nested deeper than 32 levels"));
}

/* Writes text to path. */
static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    PTDP_ASSERT(f);
    fputs(text, f);
    fclose(f);
}

/* A checkpoint directory whose shard is a symbolic link (inside or outside)
 * or a FIFO: verify must refuse the outside link and the FIFO by name,
 * before reading them, and follow the inside link (then fail on the CRC). */
static void test_shard_links(void) {
    char root[] = "/tmp/ptdp_hostile_XXXXXX";
    PTDP_ASSERT(mkdtemp(root));
    char dir[256], outside[256], shard[300], inside[300];
    snprintf(dir, sizeof dir, "%s/ck", root);
    snprintf(outside, sizeof outside, "%s/secret", root);
    snprintf(shard, sizeof shard, "%s/rank_00000.safetensors", dir);
    snprintf(inside, sizeof inside, "%s/real.safetensors", dir);
    PTDP_ASSERT(mkdir(dir, 0700) == 0);
    put(outside, "not for a checkpoint");
    put(inside, "not a safetensors file");
    char man[300];
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    put(man, good());
    FILE *null = fopen("/dev/null", "w");

    PTDP_ASSERT(symlink(outside, shard) == 0);
    CHECK(ptdp_ckpt_verify(dir, null) == PTDP_EFORMAT);
    CHECK(HAS("outside the checkpoint directory: refused"));
    unlink(shard);
    PTDP_ASSERT(symlink("../secret", shard) == 0); /* relative, same target */
    CHECK(ptdp_ckpt_verify(dir, null) == PTDP_EFORMAT);
    CHECK(HAS("outside the checkpoint directory: refused"));
    unlink(shard);
    PTDP_ASSERT(symlink("real.safetensors", shard) == 0); /* inside: followed */
    CHECK(ptdp_ckpt_verify(dir, null) == PTDP_EFORMAT);
    CHECK(!HAS("outside") && (HAS("bytes but") || HAS("checksum")));
    unlink(shard);
    PTDP_ASSERT(mkfifo(shard, 0600) == 0); /* reading it would block forever */
    CHECK(ptdp_ckpt_verify(dir, null) == PTDP_EFORMAT);
    CHECK(HAS("not a regular file"));
    unlink(shard);
    fclose(null);
    unlink(inside);
    unlink(man);
    unlink(outside);
    rmdir(dir);
    rmdir(root);
}

/* A safetensors file of an 8-byte length and a header, no data. */
static int st_open(const char *header, uint64_t hlen) {
    size_t n = strlen(header);
    unsigned char *buf = malloc(8 + n + 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, n);
    ptdp_st_file *f = NULL;
    int rc = ptdp_st_open_mem(&f, "t.safetensors", buf, 8 + n);
    ptdp_st_close(f);
    free(buf);
    return rc;
}

static void test_safetensors_bounds(void) {
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    CHECK(st_open(ok, strlen(ok)) == PTDP_OK);
    /* the declared length is checked against the limit and the file first */
    CHECK(st_open(ok, (uint64_t)1 << 63) == PTDP_EFORMAT && HAS("exceeds the limit"));
    CHECK(st_open(ok, strlen(ok) + 1) == PTDP_EFORMAT && HAS("runs past the end"));
    const char *huge = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                       "\"data_offsets\":[0,0]}}";
    CHECK(st_open(huge, strlen(huge)) == PTDP_EFORMAT);
    CHECK(HAS("shape is too large"));
    char deep[200];
    memset(deep, '{', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    CHECK(st_open(deep, sizeof deep - 1) == PTDP_EFORMAT && HAS("nested deeper"));
}

static void test_tokenizer_bounds(void) {
    /* an id far above the vocabulary would size the decode tables: refused */
    char v[8192];
    size_t n = 0;
    for (int i = 0; i < 300; i++) n += (size_t)sprintf(v + n, "%s\"t%d\": %d", i ? "," : "{", i, i);
    n += (size_t)sprintf(v + n, ",\"a\": 99999999}");
    ptdp_tokenizer *tok = NULL;
    CHECK(ptdp_tokenizer_open_mem(&tok, v, n, "v.json", "", 0, "m.txt") == PTDP_EFORMAT);
    CHECK(HAS("is not an id (0 to 16777215)") && !tok);
    /* two strings for one id (found by fuzz_bpe: cJSON reads "051" as 51): decode and
     * encode would disagree */
    n = 0;
    for (int i = 0; i < 300; i++) n += (size_t)sprintf(v + n, "%s\"t%d\": %d", i ? "," : "{", i, i);
    n += (size_t)sprintf(v + n, ",\"dup\": 051}");
    CHECK(ptdp_tokenizer_open_mem(&tok, v, n, "v.json", "", 0, "m.txt") == PTDP_EFORMAT);
    CHECK(HAS("id 51 is given to both \"t51\" and \"dup\"") && !tok);
    /* --decode: numbers past int64, signs, hex and NUL bytes are not ids */
    ptdp_tokens t = {0};
    const char *bad[] = {"99999999999999999999999999", "+5", "0x10", "-1", "5a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(ptdp_tokens_parse_ids(bad[i], strlen(bad[i]), 50257, &t) == PTDP_EINVAL);
        CHECK(HAS("is not a token id (0..50256)"));
    }
    CHECK(ptdp_tokens_parse_ids("1\0 2", 4, 50257, &t) == PTDP_EINVAL);
    t.n = 0;
    CHECK_OK(ptdp_tokens_parse_ids(" 7\t50256\r\n", 10, 50257, &t));
    CHECK(t.n == 2 && t.ids[0] == 7 && t.ids[1] == 50256);
    ptdp_tokens_free(&t);
}

static void test_json_nesting(void) {
    /* brackets inside strings, escaped quotes included, do not count */
    const char *s = "{\"a\":\"[[[[[[[[[[\\\"[[[[[[\"}";
    CHECK(ptdp_json_check(s, strlen(s), 1, "s") == PTDP_OK);
    CHECK(ptdp_json_check("[[[]]]", 6, 2, "x") == PTDP_EFORMAT && HAS("x: JSON nested deeper"));
    CHECK(ptdp_json_check("[[[]]]", 6, 3, "x") == PTDP_OK);
    /* (--config files, a command-line matter, are tests/test_train_cli.sh's) */
    /* preprocess's JSON lines: deeper than cJSON's own limit */
    size_t n = 3000;
    char *line = malloc(n);
    memset(line, '[', n);
    ptdp_tokens out = {0};
    const char *key = "text";
    CHECK(ptdp__pp_json_line(NULL, NULL, line, n, &key, 1, -1, &out, "in.jsonl", 7) ==
          PTDP_EFORMAT);
    CHECK(HAS("in.jsonl:7: JSON nested deeper than 1000 levels"));
    free(line);
}

static void test_idx_and_tokens(void) {
    /* an .idx whose lengths sum past the .bin is refused at the first
     * sequence that overruns it, whatever S */
    unsigned char idx[34 + 12 * 2 + 8 * 2] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0, 1};
    idx[17] = 8; /* uint16 */
    idx[18] = 2; /* S */
    idx[26] = 2; /* D */
    const int32_t lens[2] = {INT32_MAX, INT32_MAX};
    memcpy(idx + 34, lens, 8);
    const int64_t ptrs[2] = {0, (int64_t)INT32_MAX * 2}, docs[2] = {0, 2};
    memcpy(idx + 42, ptrs, 16);
    memcpy(idx + 58, docs, 16);
    ptdp_idx_dataset *ds = NULL;
    CHECK(ptdp_idx_open_mem(&ds, "p", idx, sizeof idx, "ab", 2) == PTDP_EFORMAT);
    CHECK(HAS("describes at least") && !ds);
    /* token file: odd size, short, token >= vocab */
    static const uint16_t toks[4] = {1, 2, 3, 9};
    ptdp_batches b;
    CHECK(ptdp_batches_open_mem(&b, "t", toks, 7, 2, 10) == PTDP_EFORMAT && HAS("whole number"));
    CHECK(ptdp_batches_open_mem(&b, "t", toks, 8, 4, 10) == PTDP_EFORMAT && HAS("fewer than"));
    CHECK(ptdp_batches_open_mem(&b, "t", toks, 8, 2, 9) == PTDP_EFORMAT && HAS("position 3"));
    CHECK_OK(ptdp_batches_open_mem(&b, "t", toks, 8, 2, 10));
    ptdp_batches_close(&b);
}

int main(void) {
    test_manifest_records();
    test_shard_links();
    test_safetensors_bounds();
    test_tokenizer_bounds();
    test_json_nesting();
    test_idx_and_tokens();
    return test_done("test_hostile_input");
}
