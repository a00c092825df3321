/* test_safetensors.c - the safetensors reader and writer: docs/formats.md's
 * upstream test vector byte for byte, a multi-tensor round trip with
 * metadata, dtype conversion, one test per validation error (each asserting
 * an error code and a message naming the file and the problem), and a read of
 * the golden GPT fixtures when they are present. Corrupt files go to /tmp. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "format/format.h"
#include "test.h"

#ifndef PTDP_SOURCE_DIR
#define PTDP_SOURCE_DIR "."
#endif

/* Writes `len8` (the u64 header length), then `hdr`, then `data` to a fresh
 * /tmp file; returns its malloc'd path. */
static char *write_raw(uint64_t len8, const char *hdr, size_t nhdr, const void *data,
                       size_t ndata) {
    char *path = malloc(64);
    strcpy(path, "/tmp/ptdp_test_st_XXXXXX");
    int fd = mkstemp(path);
    PTDP_ASSERT(fd >= 0);
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(len8 >> (8 * i));
    PTDP_ASSERT(write(fd, b, 8) == 8);
    if (nhdr) PTDP_ASSERT(write(fd, hdr, nhdr) == (ssize_t)nhdr);
    if (ndata) PTDP_ASSERT(write(fd, data, ndata) == (ssize_t)ndata);
    close(fd);
    return path;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    PTDP_ASSERT(fread(b, 1, *n, f) == *n);
    fclose(f);
    return b;
}

static const float k_vec[6] = {0, 1, 2, 3, 4, 5};

/* Opens a file that must fail with PTDP_EFORMAT and a message that names the
 * file and contains `what`. */
static void expect_bad(const char *label, const char *path, const char *what) {
    ptdp_st_file *f = (ptdp_st_file *)1;
    int rc = ptdp_st_open(&f, path);
    CHECK(rc == PTDP_EFORMAT);
    CHECK(f == NULL);
    const char *msg = ptdp_last_error();
    int names_file = strstr(msg, path) != NULL, names_problem = strstr(msg, what) != NULL;
    CHECK(names_file);
    CHECK(names_problem);
    if (rc != PTDP_EFORMAT || !names_file || !names_problem || getenv("PTDP_TEST_VERBOSE"))
        fprintf(stderr, "  case %s: rc %d, message: %s\n", label, rc, msg);
    unlink(path);
}

/* A header + data file whose header length is the header's own length. */
static void bad_case(const char *label, const char *hdr, const void *data, size_t ndata,
                     const char *what) {
    char *p = write_raw(strlen(hdr), hdr, strlen(hdr), data, ndata);
    expect_bad(label, p, what);
    free(p);
}

static void test_upstream_vector(void) {
    static const char hdr[] =
        "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    CHECK(strlen(hdr) == 64);
    /* Reader: the exact upstream bytes. */
    char *p = write_raw(64, hdr, 64, k_vec, 24);
    ptdp_st_file *f = NULL;
    CHECK_OK(ptdp_st_open(&f, p));
    if (f) {
        CHECK(ptdp_st_count(f) == 1);
        const ptdp_st_tensor *t = ptdp_st_find(f, "attn.0");
        CHECK(t != NULL && t == ptdp_st_get(f, 0));
        if (t) {
            CHECK(t->dtype == PTDP_ST_F32 && t->ndim == 3 && t->shape[0] == 1 && t->shape[1] == 2 &&
                  t->shape[2] == 3 && t->numel == 6 && t->nbytes == 24);
            CHECK(memcmp(t->data, k_vec, 24) == 0);
        }
        CHECK(ptdp_st_find(f, "attn") == NULL);
        CHECK(ptdp_st_metadata(f, "format") == NULL);
        CHECK(ptdp_st_metadata_count(f) == 0);
        float got[6] = {0};
        CHECK_OK(ptdp_st_read_f32(f, "attn.0", got, 6));
        CHECK(memcmp(got, k_vec, 24) == 0);
        CHECK(ptdp_st_read_f32(f, "attn.0", got, 5) == PTDP_EFORMAT);
        CHECK(strstr(ptdp_last_error(), "6 elements") != NULL);
        CHECK(ptdp_st_read_f32(f, "attn.1", got, 6) == PTDP_ENOTFOUND);
        CHECK(strstr(ptdp_last_error(), "attn.1") != NULL);
        int32_t gi[6];
        CHECK(ptdp_st_read_i32(f, "attn.0", gi, 6) == PTDP_EUNSUPPORTED);
    }
    ptdp_st_close(f);
    unlink(p);

    /* Writer: the same tensor, plus the mandatory metadata, padded to 8. */
    static const char whdr[] =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}} ";
    CHECK(strlen(whdr) == 96);
    char *q = write_raw(96, whdr, 96, k_vec, 24);
    size_t nq = 0;
    unsigned char *want = slurp(q, &nq);
    unlink(q);
    free(q);
    ptdp_st_writer *w = NULL;
    CHECK_OK(ptdp_st_writer_init(&w));
    int64_t shape[3] = {1, 2, 3};
    CHECK_OK(ptdp_st_writer_add(w, "attn.0", PTDP_ST_F32, 3, shape, k_vec));
    CHECK_OK(ptdp_st_write(w, p));
    ptdp_st_writer_free(w);
    size_t n = 0;
    unsigned char *got = slurp(p, &n);
    CHECK(got != NULL && n == 8 + 96 + 24 && n == nq);
    CHECK(got && memcmp(got, want, nq) == 0);
    CHECK_OK(ptdp_st_open(&f, p));
    if (f) {
        CHECK(ptdp_st_metadata(f, "format") && strcmp(ptdp_st_metadata(f, "format"), "pt") == 0);
        const ptdp_st_tensor *t = ptdp_st_find(f, "attn.0");
        CHECK(t && memcmp(t->data, k_vec, 24) == 0);
        CHECK(t && ((uintptr_t)t->data % 8) == 0);
    }
    ptdp_st_close(f);
    free(got);
    free(want);
    unlink(p);
    free(p);
}

static void test_round_trip(void) {
    float a[2 * 3 * 4];
    for (int i = 0; i < 24; i++) a[i] = (float)i * 0.5f - 3.f;
    int32_t tok[5] = {7, -1, 0, 2147483647, 42};
    uint16_t bf[3] = {0x3f80, 0xc000, 0x4049};         /* 1, -2, 3.140625 */
    uint16_t hf[4] = {0x3c00, 0xc000, 0x0001, 0x7c00}; /* 1, -2, 2^-24, inf */
    double dd[2] = {1.5, -0.25};
    uint8_t u8[3] = {1, 2, 255};
    float scalar = 9.f;
    int64_t sa[3] = {2, 3, 4}, st[1] = {5}, s3[1] = {3}, s4[1] = {4}, s2[1] = {2}, sz[2] = {0, 7};

    ptdp_st_writer *w = NULL;
    CHECK_OK(ptdp_st_writer_init(&w));
    CHECK_OK(ptdp_st_writer_meta(w, "n_layer", "2"));
    CHECK_OK(ptdp_st_writer_meta(w, "note", "quote \" backslash \\ newline \n tab \t"));
    CHECK_OK(ptdp_st_writer_meta(w, "n_layer", "3")); /* replaces */
    CHECK_OK(ptdp_st_writer_meta(w, "format", "pt"));
    CHECK(ptdp_st_writer_meta(w, "format", "np") == PTDP_EINVAL);
    CHECK_OK(ptdp_st_writer_add(w, "w.weird \"name\"", PTDP_ST_F32, 3, sa, a));
    CHECK_OK(ptdp_st_writer_add(w, "tokens", PTDP_ST_I32, 1, st, tok));
    CHECK_OK(ptdp_st_writer_add(w, "bf", PTDP_ST_BF16, 1, s3, bf));
    CHECK_OK(ptdp_st_writer_add(w, "hf", PTDP_ST_F16, 1, s4, hf));
    CHECK_OK(ptdp_st_writer_add(w, "dd", PTDP_ST_F64, 1, s2, dd));
    CHECK_OK(ptdp_st_writer_add(w, "u8", PTDP_ST_U8, 1, s3, u8));
    CHECK_OK(ptdp_st_writer_add(w, "empty", PTDP_ST_F32, 2, sz, NULL));
    CHECK_OK(ptdp_st_writer_add(w, "scalar", PTDP_ST_F32, 0, NULL, &scalar));
    CHECK(ptdp_st_writer_add(w, "tokens", PTDP_ST_I32, 1, st, tok) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "duplicate") != NULL);
    CHECK(ptdp_st_writer_add(w, "__metadata__", PTDP_ST_I32, 1, st, tok) == PTDP_EINVAL);

    char path[] = "/tmp/ptdp_test_st_rt_XXXXXX";
    int fd = mkstemp(path);
    PTDP_ASSERT(fd >= 0);
    close(fd);
    CHECK_OK(ptdp_st_write(w, path));
    ptdp_st_writer_free(w);
    ptdp_st_writer_free(NULL);

    ptdp_st_file *f = NULL;
    CHECK_OK(ptdp_st_open(&f, path));
    if (f) {
        CHECK(ptdp_st_count(f) == 8);
        CHECK(strcmp(ptdp_st_get(f, 0)->name, "w.weird \"name\"") == 0);
        CHECK(strcmp(ptdp_st_get(f, 7)->name, "scalar") == 0);
        CHECK(ptdp_st_metadata_count(f) == 3);
        const char *k, *v;
        ptdp_st_metadata_get(f, 0, &k, &v);
        CHECK(strcmp(k, "format") == 0 && strcmp(v, "pt") == 0);
        CHECK(strcmp(ptdp_st_metadata(f, "n_layer"), "3") == 0);
        CHECK(strcmp(ptdp_st_metadata(f, "note"), "quote \" backslash \\ newline \n tab \t") == 0);
        CHECK(ptdp_st_metadata(f, "absent") == NULL);
        float ga[24];
        CHECK_OK(ptdp_st_read_f32(f, "w.weird \"name\"", ga, 24));
        CHECK(memcmp(ga, a, sizeof a) == 0);
        int32_t gt[5];
        CHECK_OK(ptdp_st_read_i32(f, "tokens", gt, 5));
        CHECK(memcmp(gt, tok, sizeof tok) == 0);
        float g3[4];
        CHECK_OK(ptdp_st_read_f32(f, "bf", g3, 3));
        CHECK(g3[0] == 1.f && g3[1] == -2.f && g3[2] == 3.140625f);
        CHECK_OK(ptdp_st_read_f32(f, "hf", g3, 4));
        CHECK(g3[0] == 1.f && g3[1] == -2.f && g3[2] == ldexpf(1.f, -24) && isinf(g3[3]) &&
              g3[3] > 0);
        CHECK_OK(ptdp_st_read_f32(f, "dd", g3, 2));
        CHECK(g3[0] == 1.5f && g3[1] == -0.25f);
        int32_t g8[3];
        CHECK_OK(ptdp_st_read_i32(f, "u8", g8, 3));
        CHECK(g8[0] == 1 && g8[2] == 255);
        const ptdp_st_tensor *e = ptdp_st_find(f, "empty");
        CHECK(e && e->ndim == 2 && e->numel == 0 && e->nbytes == 0 && e->shape[1] == 7);
        const ptdp_st_tensor *s = ptdp_st_find(f, "scalar");
        CHECK(s && s->ndim == 0 && s->numel == 1 && s->nbytes == 4);
        CHECK_OK(ptdp_st_read_f32(f, "scalar", g3, 1));
        CHECK(g3[0] == 9.f);
        CHECK(strcmp(ptdp_st_path(f), path) == 0);
    }
    ptdp_st_close(f);
    ptdp_st_close(NULL);

    /* Atomic write failure: a missing directory leaves nothing behind. */
    CHECK_OK(ptdp_st_writer_init(&w));
    CHECK(ptdp_st_write(w, "/nonexistent_dir_ptdp/x.safetensors") == PTDP_EIO);
    CHECK(strstr(ptdp_last_error(), "No such file") != NULL);
    ptdp_st_writer_free(w);
    unlink(path);
}

static void test_errors(void) {
    float d12[12] = {0};
    unsigned char zero = 0;
    char *p;

    /* Truncated: shorter than the length field; data shorter than declared. */
    p = write_raw(0, NULL, 0, NULL, 0);
    {
        FILE *fp = fopen(p, "wb"); /* 5 bytes only */
        fwrite("\x10\0\0\0\0", 1, 5, fp);
        fclose(fp);
    }
    expect_bad("short", p, "truncated");
    free(p);
    bad_case("short data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", d12,
             20, "truncated");
    {
        char path[] = "/tmp/ptdp_test_st_empty_XXXXXX";
        int fd = mkstemp(path);
        PTDP_ASSERT(fd >= 0);
        close(fd);
        expect_bad("empty", path, "truncated");
    }

    /* Header length too large: over the 1e8 limit, and past the end. */
    p = write_raw(100000001ull, "{}", 2, NULL, 0);
    expect_bad("huge header", p, "header length");
    free(p);
    p = write_raw(1000, "{}", 2, NULL, 0);
    expect_bad("header past end", p, "header length");
    free(p);

    bad_case("bad json", "{\"a\":{\"dtype\":\"F32\",", NULL, 0, "JSON");
    bad_case("json garbage after", "{} x", NULL, 0, "JSON");
    bad_case("json not object", "[1,2]   ", NULL, 0, "JSON");
    p = write_raw(4, "{}\0 ", 4, NULL, 0);
    expect_bad("nul padding", p, "NUL");
    free(p);

    bad_case("overlap",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[16,40]}}",
             d12, 40, "overlap");
    bad_case("hole",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[28,48]}}",
             d12, 48, "hole");
    bad_case("hole at start", "{\"a\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[4,24]}}",
             d12, 24, "hole");
    bad_case("size vs shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}",
             d12, 20, "shape");
    bad_case("duplicate",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]}}",
             d12, 24, "duplicate");
    bad_case("unknown dtype", "{\"a\":{\"dtype\":\"Q4\",\"shape\":[3],\"data_offsets\":[0,12]}}",
             d12, 12, "dtype");
    bad_case("trailing", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", d12,
             16, "trailing");
    bad_case("trailing no tensors", "{\"__metadata__\":{\"format\":\"pt\"}}", &zero, 1, "trailing");

    /* Missing or malformed fields. */
    bad_case("no dtype", "{\"a\":{\"shape\":[3],\"data_offsets\":[0,12]}}", d12, 12, "dtype");
    bad_case("no shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,12]}}", d12, 12, "shape");
    bad_case("no offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3]}}", d12, 12, "data_offsets");
    bad_case("neg dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-3],\"data_offsets\":[0,12]}}", d12,
             12, "shape");
    bad_case("frac dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,12]}}", d12,
             12, "shape");
    bad_case("reversed offsets",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[12,0]}}", d12, 12,
             "data_offsets");
    bad_case("meta not string", "{\"__metadata__\":{\"format\":1}}", NULL, 0, "not a string");
    bad_case("entry not object", "{\"a\":3}", NULL, 0, "not a JSON object");

    /* A missing file is an I/O error naming the file. */
    ptdp_st_file *f = NULL;
    CHECK(ptdp_st_open(&f, "/nonexistent_ptdp.safetensors") == PTDP_EIO);
    CHECK(strstr(ptdp_last_error(), "/nonexistent_ptdp.safetensors") != NULL);
}

/* The golden GPT fixtures: present, well formed, self-consistent. The model
 * tests compare against their contents; here only the container is checked. */
static void test_fixture(const char *name, int n_layer) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", PTDP_SOURCE_DIR, name);
    if (access(path, R_OK) != 0) {
        printf("skipping %s (not present)\n", path);
        return;
    }
    ptdp_st_file *f = NULL;
    CHECK_OK(ptdp_st_open(&f, path));
    if (!f) return;
    CHECK(strcmp(ptdp_st_metadata(f, "format"), "pt") == 0);
    CHECK(atoi(ptdp_st_metadata(f, "n_layer")) == n_layer);
    int V = atoi(ptdp_st_metadata(f, "vocab_size")), h = atoi(ptdp_st_metadata(f, "n_embd"));
    const ptdp_st_tensor *wte = ptdp_st_find(f, "transformer.wte.weight");
    CHECK(wte && wte->dtype == PTDP_ST_F32 && wte->ndim == 2 && wte->shape[0] == V &&
          wte->shape[1] == h);
    const ptdp_st_tensor *g = ptdp_st_find(f, "ref.grads.transformer.wte.weight");
    CHECK(g && g->ndim == 3 && g->shape[0] == atoi(ptdp_st_metadata(f, "iters")) &&
          g->shape[1] == V && g->shape[2] == h);
    float losses[10];
    CHECK_OK(ptdp_st_read_f32(f, "ref.losses", losses, 10));
    float loss0;
    CHECK_OK(ptdp_st_read_f32(f, "ref.loss", &loss0, 1));
    CHECK_CLOSE(losses[0], loss0, 1e-6, 0);
    CHECK_CLOSE(loss0, logf((float)V), 0.05, 0); /* near-uniform at init */
    ptdp_st_close(f);
}

int main(void) {
    test_upstream_vector();
    test_round_trip();
    test_errors();
    test_fixture("gpt_a.safetensors", 2);
    test_fixture("gpt_b.safetensors", 3);
    return test_done("test_safetensors");
}
