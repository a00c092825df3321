/* test_data_indexed.c - Megatron indexed dataset writer and reader: the
 * docs/formats.md worked example byte for byte against a hand-made fixture,
 * read-back of random documents (uint16 and int32), and corrupt, truncated
 * and mismatched .bin/.idx pairs rejected with a message naming the file. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "data/data.h"
#include "test.h"

#ifndef PTDP_SOURCE_DIR
#define PTDP_SOURCE_DIR "."
#endif
#define FIX PTDP_SOURCE_DIR "/tests/fixtures/data/"

static long read_all(const char *path, unsigned char *buf, long cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long n = (long)fread(buf, 1, (size_t)cap, f);
    fclose(f);
    return n;
}

static int write_all(const char *path, const unsigned char *buf, long n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite(buf, 1, (size_t)n, f);
    return fclose(f);
}

static int same_file(const char *a, const char *b) {
    static unsigned char x[1 << 16], y[1 << 16];
    long na = read_all(a, x, sizeof x), nb = read_all(b, y, sizeof y);
    return na >= 0 && na == nb && memcmp(x, y, (size_t)na) == 0;
}

/* Writes a corrupted copy of the worked example under dir/bad and expects
 * ptdp_idx_open to fail with `code` and a message containing `needle`. */
static void expect_bad(const char *dir, const unsigned char *idx, long nidx,
                       const unsigned char *bin, long nbin, int code, const char *needle) {
    char p[512], q[520];
    snprintf(p, sizeof p, "%s/bad", dir);
    snprintf(q, sizeof q, "%s.idx", p);
    if (idx)
        write_all(q, idx, nidx);
    else
        unlink(q);
    snprintf(q, sizeof q, "%s.bin", p);
    if (bin)
        write_all(q, bin, nbin);
    else
        unlink(q);
    ptdp_idx_dataset *ds = (ptdp_idx_dataset *)1;
    int rc = ptdp_idx_open(&ds, p);
    int ok = rc == code && ds == NULL && strstr(ptdp_last_error(), needle) &&
             strstr(ptdp_last_error(), dir);
    if (!ok)
        fprintf(stderr, "expect_bad(%s): rc %d, message '%s'\n", needle, rc, ptdp_last_error());
    CHECK(ok);
}

int main(void) {
    char dir[] = "/tmp/ptdp_test_indexed_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char prefix[512], path[520];

    /* 1. the worked example, byte for byte */
    snprintf(prefix, sizeof prefix, "%s/worked", dir);
    ptdp_idx_writer *w = NULL;
    CHECK_OK(ptdp_idx_writer_open(&w, prefix, PTDP_IDX_U16));
    int32_t d1[] = {1, 2, 3}, d2[] = {4, 5};
    CHECK_OK(ptdp_idx_writer_add_document(w, d1, 3));
    CHECK_OK(ptdp_idx_writer_add_document(w, d2, 2));
    CHECK_OK(ptdp_idx_writer_finish(w));
    snprintf(path, sizeof path, "%s.idx", prefix);
    CHECK(same_file(path, FIX "worked.idx"));
    snprintf(path, sizeof path, "%s.bin", prefix);
    CHECK(same_file(path, FIX "worked.bin"));

    ptdp_idx_dataset *ds = NULL;
    CHECK_OK(ptdp_idx_open(&ds, FIX "worked"));
    if (ds) {
        CHECK(ptdp_idx_num_sequences(ds) == 2 && ptdp_idx_num_documents(ds) == 2);
        CHECK(ptdp_idx_dtype(ds) == PTDP_IDX_U16);
        CHECK(ptdp_idx_sequence_length(ds, 0) == 3 && ptdp_idx_sequence_length(ds, 1) == 2);
        CHECK(ptdp_idx_document_index(ds, 2) == 2);
        int32_t got[3] = {0};
        CHECK_OK(ptdp_idx_read(ds, 1, 0, 2, got));
        CHECK(got[0] == 4 && got[1] == 5);
        CHECK_OK(ptdp_idx_read(ds, 0, 1, 2, got));
        CHECK(got[0] == 2 && got[1] == 3);
        CHECK(ptdp_idx_read(ds, 1, 1, 2, got) == PTDP_EINVAL);
        ptdp_idx_close(ds);
    }

    /* 2. random documents, both dtypes, empty documents included */
    for (int dt = 0; dt < 2; dt++) {
        int dtype = dt ? PTDP_IDX_I32 : PTDP_IDX_U16;
        snprintf(prefix, sizeof prefix, "%s/rand%d", dir, dt);
        CHECK_OK(ptdp_idx_writer_open(&w, prefix, dtype));
        ptdp_rng_key key = ptdp_rng_key_make(7, "test_data_indexed");
        static int32_t toks[200][300];
        int lens[200];
        for (int d = 0; d < 200; d++) {
            uint32_t r[4];
            ptdp_rng_u32x4(key, (uint64_t)d * 1000, r);
            lens[d] = d % 17 == 0 ? 0 : (int)(r[0] % 300);
            for (int i = 0; i < lens[d]; i++) {
                ptdp_rng_u32x4(key, (uint64_t)d * 1000 + 1 + i, r);
                toks[d][i] = (int32_t)(r[0] % (dt ? 100000u : 65536u));
            }
            CHECK_OK(ptdp_idx_writer_add_document(w, toks[d], (size_t)lens[d]));
        }
        CHECK_OK(ptdp_idx_writer_finish(w));
        CHECK_OK(ptdp_idx_open(&ds, prefix));
        if (!ds) continue;
        CHECK(ptdp_idx_num_documents(ds) == 200);
        int64_t seq = 0;
        int ok = 1;
        for (int d = 0; d < 200; d++) {
            ok &= ptdp_idx_document_index(ds, d) == seq;
            if (lens[d] == 0) continue;
            int32_t got[300];
            ok &= ptdp_idx_sequence_length(ds, seq) == lens[d];
            ok &= ptdp_idx_read(ds, seq, 0, lens[d], got) == 0;
            ok &= memcmp(got, toks[d], (size_t)lens[d] * 4) == 0;
            seq++;
        }
        CHECK(ok);
        CHECK(ptdp_idx_num_sequences(ds) == seq);
        ptdp_idx_close(ds);
    }
    {
        int32_t big = 70000;
        snprintf(prefix, sizeof prefix, "%s/big", dir);
        CHECK_OK(ptdp_idx_writer_open(&w, prefix, PTDP_IDX_U16));
        CHECK(ptdp_idx_writer_add_document(w, &big, 1) == PTDP_EINVAL);
        ptdp_idx_writer_free(w);
        CHECK(ptdp_idx_writer_open(&w, prefix, PTDP_IDX_F32) == PTDP_EUNSUPPORTED);
        snprintf(prefix, sizeof prefix, "%s/no/such/dir/x", dir);
        CHECK(ptdp_idx_writer_open(&w, prefix, PTDP_IDX_U16) == PTDP_EIO);
    }

    /* 3. corrupt, truncated, mismatched */
    unsigned char idx[82], bin[10], b[128];
    CHECK(read_all(FIX "worked.idx", idx, sizeof idx) == 82);
    CHECK(read_all(FIX "worked.bin", bin, sizeof bin) == 10);
    expect_bad(dir, NULL, 0, bin, 10, PTDP_EIO, "bad.idx");
    expect_bad(dir, idx, 82, NULL, 0, PTDP_EIO, "bad.bin");
    expect_bad(dir, idx, 20, bin, 10, PTDP_EFORMAT, "shorter than the 34-byte header");
    memcpy(b, idx, 82);
    b[0] = 'X';
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "bad magic");
    memcpy(b, idx, 82);
    b[9] = 2;
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "version 2");
    memcpy(b, idx, 82);
    b[17] = 9;
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "unknown dtype code 9");
    memcpy(b, idx, 82);
    b[17] = 7;
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "cannot hold token ids");
    memcpy(b, idx, 82);
    b[18] = 3;
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "does not match S = 3");
    expect_bad(dir, idx, 81, bin, 10, PTDP_EFORMAT, "size 81 does not match");
    memcpy(b, idx, 82);
    b[34] = 0xFF;
    b[35] = 0xFF;
    b[36] = 0xFF;
    b[37] = 0xFF;
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "negative length");
    memcpy(b, idx, 82);
    b[50] = 8;
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "pointers inconsistent");
    memcpy(b, idx, 82);
    b[66] = 2;
    b[74] = 1;
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "out of order");
    memcpy(b, idx, 82);
    b[74] = 1;
    expect_bad(dir, b, 82, bin, 10, PTDP_EFORMAT, "last document boundary");
    expect_bad(dir, idx, 82, bin, 8, PTDP_EFORMAT, "truncated or mismatched");
    expect_bad(dir, idx, 82, bin, 0, PTDP_EFORMAT, "truncated or mismatched");
    {
        /* a pair from two different datasets */
        unsigned char big_bin[4096];
        snprintf(path, sizeof path, "%s/rand0.bin", dir);
        long n = read_all(path, big_bin, sizeof big_bin);
        expect_bad(dir, idx, 82, big_bin, n, PTDP_EFORMAT, "truncated or mismatched");
    }

    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    CHECK(system(path) == 0);
    return test_done("test_data_indexed");
}
