/* test_megatron.c - the readers under `ptdp checkpoint import-megatron`: the
 * pickle machine (a writer round trip; a real torch.save file with args,
 * optimizer and RNG states; a pickle that would run os.system kept as inert
 * data; one malformed pickle per check, each asserting its message; every
 * one-byte mutation and truncation of a pickle and of a zip, which must end
 * in OK or an error, never a crash), the zip container (truncated,
 * corrupted, compressed entries), and the import's refusals of what ptdp's
 * GPT cannot represent (SwiGLU, GQA, rotary, untied output layer) and of
 * missing, misshapen or unknown tensors, on small Megatron files written
 * here. Files go to /tmp. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "ckpt/megatron/megatron.h"
#include "format/torch.h"
#include "test.h"

#ifndef PTDP_SOURCE_DIR
#define PTDP_SOURCE_DIR "."
#endif

/* rc is `code` and the message holds `needle`. */
#define CHECK_ERR(expr, code, needle)                                                           \
    do {                                                                                        \
        int rc__ = (expr);                                                                      \
        int ok__ = rc__ == (code) && strstr(ptdp_last_error(), (needle)) != NULL;               \
        CHECK(ok__);                                                                            \
        if (!ok__)                                                                              \
            fprintf(stderr, "  got %d '%s', wanted %d '%s'\n", rc__, ptdp_last_error(), (code), \
                    (needle));                                                                  \
    } while (0)

static int parse(const void *d, size_t n, ptdp__pk **p, const ptdp__pk_node **root) {
    return ptdp__pk_parse(p, root, d, n, "test.pkl");
}

static void test_round_trip(void) {
    ptdp__pkw w;
    ptdp__pkw_init(&w);
    ptdp__pkw_dict_begin(&w);
    ptdp__pkw_str(&w, "args");
    ptdp__pkw_namespace_begin(&w);
    ptdp__pkw_str(&w, "num_layers"), ptdp__pkw_int(&w, 24);
    ptdp__pkw_str(&w, "big"), ptdp__pkw_int(&w, 5000000000ll);
    ptdp__pkw_str(&w, "neg"), ptdp__pkw_int(&w, -7);
    ptdp__pkw_str(&w, "lr"), ptdp__pkw_float(&w, 1.5e-4);
    ptdp__pkw_str(&w, "swiglu"), ptdp__pkw_bool(&w, 0);
    ptdp__pkw_str(&w, "none"), ptdp__pkw_none(&w);
    ptdp__pkw_str(&w, "name"), ptdp__pkw_str(&w, "GPT2BPETokenizer");
    ptdp__pkw_namespace_end(&w);
    ptdp__pkw_str(&w, "w");
    int64_t shape[2] = {3, 5};
    CHECK(ptdp__pkw_tensor_f32(&w, 2, shape) == 0);
    ptdp__pkw_dict_end(&w);
    CHECK_OK(ptdp__pkw_finish(&w));
    ptdp__pk *p = NULL;
    const ptdp__pk_node *r = NULL;
    CHECK_OK(parse(w.buf, w.len, &p, &r));
    const ptdp__pk_node *a = ptdp__pk_get(r, "args"), *t = ptdp__pk_get(r, "w");
    CHECK(a && a->kind == PTDP_PK_OBJECT && !strcmp(a->cls->s, "argparse.Namespace"));
    const ptdp__pk_node *x;
    CHECK((x = ptdp__pk_attr(a, "num_layers")) && x->kind == PTDP_PK_INT && x->i == 24);
    CHECK((x = ptdp__pk_attr(a, "big")) && x->i == 5000000000ll);
    CHECK((x = ptdp__pk_attr(a, "neg")) && x->i == -7);
    CHECK((x = ptdp__pk_attr(a, "lr")) && x->kind == PTDP_PK_FLOAT && x->f == 1.5e-4);
    CHECK((x = ptdp__pk_attr(a, "swiglu")) && x->kind == PTDP_PK_BOOL && x->i == 0);
    CHECK((x = ptdp__pk_attr(a, "none")) && x->kind == PTDP_PK_NONE);
    CHECK((x = ptdp__pk_attr(a, "name")) && !strcmp(x->s, "GPT2BPETokenizer"));
    CHECK(t && t->kind == PTDP_PK_TENSOR && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 5 &&
          t->stride[0] == 5 && t->stride[1] == 1 && t->dtype == PTDP_TD_F32 &&
          !strcmp(t->storage->s, "0") && t->storage->i == 15);
    ptdp__pk_free(p);
    free(w.buf);
}

/* A real torch.save file: args with a torch dtype, OrderedDicts, numpy and
 * Python RNG states, an optimizer: all parse; tensors read back. */
static void test_fixture(void) {
    ptdp__torch_file tf;
    const char *path = PTDP_SOURCE_DIR
        "/tests/fixtures/megatron/core_t1p1/iter_0000020/mp_rank_00/model_optim_rng.pt";
    CHECK_OK(ptdp__torch_open(&tf, path));
    if (!tf.root) return;
    const ptdp__pk_node *a = ptdp__pk_get(tf.root, "args"), *m = ptdp__pk_get(tf.root, "model"), *x;
    CHECK((x = ptdp__pk_attr(a, "padded_vocab_size")) && x->i == 56);
    CHECK((x = ptdp__pk_attr(a, "params_dtype")) && x->kind == PTDP_PK_GLOBAL &&
          !strcmp(x->s, "torch.float32"));
    CHECK(m && m->kind == PTDP_PK_DICT && m->n == 2 * (2 + 2 * 12 + 2));
    CHECK((x = ptdp__pk_get(tf.root, "rng_state")) && x->kind == PTDP_PK_LIST && x->n == 1);
    const ptdp__pk_node *wte = ptdp__pk_get(m, "embedding.word_embeddings.weight");
    CHECK(wte && wte->kind == PTDP_PK_TENSOR && wte->shape[0] == 56 && wte->shape[1] == 8);
    float buf[56 * 8];
    CHECK_OK(ptdp__torch_read_f32(&tf, wte, buf, 56 * 8));
    CHECK(fabsf(buf[0]) < 0.2f && buf[0] != 0.0f);
    CHECK_ERR(ptdp__torch_read_f32(&tf, wte, buf, 10), PTDP_EFORMAT, "448 elements");
    ptdp__torch_close(&tf);
}

/* Pickles that import or call things are data here, never run. */
static void test_inert(void) {
    static const char pk[] = "\x80\x02"
                             "cos\nsystem\n"
                             "X\x08\x00\x00\x00rm -rf /"
                             "\x85R.";
    ptdp__pk *p;
    const ptdp__pk_node *r;
    CHECK_OK(parse(pk, sizeof pk - 1, &p, &r));
    CHECK(r && r->kind == PTDP_PK_OBJECT && !strcmp(r->cls->s, "os.system") && r->args->n == 1 &&
          !strcmp(r->args->items[0]->s, "rm -rf /"));
    ptdp__pk_free(p);
}

static void test_malformed(void) {
    static const struct {
        const char *bytes;
        size_t n;
        const char *msg;
    } bad[] = {
#define B(s, m) {s, sizeof s - 1, m}
        B("\x80\x02\xff.", "not an opcode"),
        B("\x80\x02}", "ends without STOP"),
        B("\x80\x02X\xf0\xff\xff\xff"
          "abc.",
          "ends inside an opcode's argument"),
        B("\x80\x02h\x05.", "never PUT"),
        B("\x80\x02t.", "no MARK"),
        B("\x80\x02"
          "a.",
          "underflow"),
        B("\x80\x02K\x01r\xff\xff\xff\x7f.", "memo index"),
        B("\x80\x02K\x01K\x02.", "STOP with other than one value"),
        B("\x80\x09.", "protocol above 5"),
        B("\x80\x02K\x01Q.", "persistent id"),
        B("\x80\x02(X\x07\x00\x00\x00storagectorch\nEvilStorage\nX\x01\x00\x00\x00"
          "0X\x03\x00\x00\x00"
          "cpuK\x04tQ.",
          "storage type torch.EvilStorage"),
        /* a tensor of 3 x 5 elements on a 4-element storage */
        B("\x80\x02"
          "ctorch._utils\n_rebuild_tensor_v2\n("
          "(X\x07\x00\x00\x00storagectorch\n"
          "FloatStorage\nX\x01\x00\x00\x00"
          "0X\x03\x00\x00\x00"
          "cpuK\x04tQK\x00K\x03K\x05\x86K"
          "\x05K\x01\x86\x89tR.",
          "past the end of its storage"),
        /* size (2^40,) stride (2^40,): the extent overflows int64 */
        B("\x80\x02"
          "ctorch._utils\n_rebuild_tensor_v2\n("
          "(X\x07\x00\x00\x00storagectorch\n"
          "FloatStorage\nX\x01\x00\x00\x00"
          "0X\x03\x00\x00\x00"
          "cpuK\x04tQK\x00\x8a\x06\x00\x00\x00\x00\x00\x01\x85\x8a\x06\x00\x00\x00\x00\x00"
          "\x01\x85\x89tR.",
          "overflows 64 bits"),
        B("\x80\x02]K\x01K\x02s.", "SETITEM(S) on something that is not a dict"),
        B("\x80\x02"
          "cmod\n",
          "newline"),
        B("\x80\x02(K\x01K\x02K\x03"
          "d.",
          "odd number"),
#undef B
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ptdp__pk *p = (ptdp__pk *)1;
        const ptdp__pk_node *r;
        int rc = parse(bad[i].bytes, bad[i].n, &p, &r);
        int ok = rc == PTDP_EFORMAT && strstr(ptdp_last_error(), bad[i].msg) &&
                 strstr(ptdp_last_error(), "test.pkl: pickle byte") && p == NULL;
        CHECK(ok);
        if (!ok) fprintf(stderr, "  case %zu: %d '%s'\n", i, rc, ptdp_last_error());
    }
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

/* Every truncation and every one-byte change (to a few values) of the
 * fixture's pickle, and of its zip's headers, ends in OK or an error. */
static void test_mutations(void) {
    size_t n;
    unsigned char *z = slurp(PTDP_SOURCE_DIR "/tests/fixtures/megatron/core_t2p2/iter_0000020/"
                                             "mp_rank_01_001/model_optim_rng.pt",
                             &n);
    CHECK(z != NULL);
    if (!z) return;
    CHECK_OK(ptdp_torch_check(z, n));
    ptdp__zip zip;
    CHECK_OK(ptdp__zip_open_mem(&zip, z, n, "fixture"));
    const ptdp__zip_entry *e = ptdp__zip_find(&zip, "data.pkl");
    CHECK(e != NULL);
    if (!e) return;
    unsigned char *pk = malloc((size_t)e->size);
    memcpy(pk, z + e->offset, (size_t)e->size);
    const size_t pn = (size_t)e->size;
    ptdp__zip_close(&zip);
    int oks = 0, errs = 0;
    static const unsigned char vals[] = {0x00, 0x01, 0x28, 0x2e, 0x71, 0x7f, 0x80, 0xff};
    for (size_t k = 0; k < pn; k++) {
        if (ptdp_pickle_check(pk, k))
            errs++;
        else
            oks++;
        unsigned char keep = pk[k];
        for (size_t v = 0; v < sizeof vals; v++) {
            pk[k] = vals[v];
            if (ptdp_pickle_check(pk, pn))
                errs++;
            else
                oks++;
        }
        pk[k] = keep;
    }
    CHECK(errs > 0 && oks > 0);
    /* the zip: truncations anywhere, byte changes outside the stored data
     * (headers and directory; changes inside the data fail the CRC) */
    int zerr = 0;
    for (size_t k = 0; k < n; k += 7) zerr += ptdp_torch_check(z, k) != PTDP_OK;
    CHECK(zerr == (int)((n + 6) / 7));
    for (size_t k = 0; k < n; k++) {
        if (k >= 64 && k < n - 600) continue;
        unsigned char keep = z[k];
        for (size_t v = 0; v < sizeof vals; v++) {
            z[k] = vals[v];
            ptdp_torch_check(z, n);
        }
        z[k] = keep;
    }
    z[100] ^= 0x40; /* inside data.pkl */
    CHECK_ERR(ptdp_torch_check(z, n), PTDP_EFORMAT, "fails its CRC-32 check");
    z[100] ^= 0x40;
    CHECK_ERR(ptdp_torch_check(z, 1000), PTDP_EFORMAT, "truncated");
    z[8] = 8; /* local header says deflate: the central record is what counts */
    CHECK_OK(ptdp_torch_check(z, n));
    free(pk);
    free(z);
}

/* ---- small Megatron checkpoints written here ---------------------------------- */

/* l=1 h=8 a=2 ffn=32 positions 8 V=16, t=1 p=1; `skip` drops a tensor,
 * `rename` replaces one name, `fat` gives fc1 a wrong shape; extra_arg adds
 * one boolean (or string) argument. */
static void write_tiny(const char *dir, const char *skip, const char *rename, int fat,
                       const char *extra_arg, const char *extra_val) {
    char p[512];
    snprintf(p, sizeof p, "rm -rf %s && mkdir -p %s/iter_0000001/mp_rank_00", dir, dir);
    PTDP_ASSERT(system(p) == 0);
    static const struct {
        const char *name;
        int nd;
        int64_t r, c;
    } ts[] = {
        {"embedding.word_embeddings.weight", 2, 16, 8},
        {"embedding.position_embeddings.weight", 2, 8, 8},
        {"decoder.layers.0.input_layernorm.weight", 1, 8, 0},
        {"decoder.layers.0.input_layernorm.bias", 1, 8, 0},
        {"decoder.layers.0.self_attention.linear_qkv.weight", 2, 24, 8},
        {"decoder.layers.0.self_attention.linear_qkv.bias", 1, 24, 0},
        {"decoder.layers.0.self_attention.linear_proj.weight", 2, 8, 8},
        {"decoder.layers.0.self_attention.linear_proj.bias", 1, 8, 0},
        {"decoder.layers.0.pre_mlp_layernorm.weight", 1, 8, 0},
        {"decoder.layers.0.pre_mlp_layernorm.bias", 1, 8, 0},
        {"decoder.layers.0.mlp.linear_fc1.weight", 2, 32, 8},
        {"decoder.layers.0.mlp.linear_fc1.bias", 1, 32, 0},
        {"decoder.layers.0.mlp.linear_fc2.weight", 2, 8, 32},
        {"decoder.layers.0.mlp.linear_fc2.bias", 1, 8, 0},
        {"decoder.final_layernorm.weight", 1, 8, 0},
        {"decoder.final_layernorm.bias", 1, 8, 0},
    };
    const int nt = (int)(sizeof ts / sizeof ts[0]);
    ptdp__pkw w;
    ptdp__pkw_init(&w);
    ptdp__pkw_dict_begin(&w);
    ptdp__pkw_str(&w, "args");
    ptdp__pkw_namespace_begin(&w);
    const char *ints[] = {"num_layers",
                          "hidden_size",
                          "num_attention_heads",
                          "ffn_hidden_size",
                          "max_position_embeddings",
                          "seq_length",
                          "vocab_size",
                          "padded_vocab_size"};
    const int64_t iv[] = {1, 8, 2, 32, 8, 8, 16, 16};
    for (int i = 0; i < 8; i++) ptdp__pkw_str(&w, ints[i]), ptdp__pkw_int(&w, iv[i]);
    if (extra_arg) {
        ptdp__pkw_str(&w, extra_arg);
        if (extra_val)
            ptdp__pkw_str(&w, extra_val);
        else
            ptdp__pkw_bool(&w, 1);
    }
    ptdp__pkw_namespace_end(&w);
    ptdp__pkw_str(&w, "checkpoint_version"), ptdp__pkw_float(&w, 3.0);
    ptdp__pkw_str(&w, "iteration"), ptdp__pkw_int(&w, 1);
    ptdp__pkw_str(&w, "model");
    ptdp__pkw_dict_begin(&w);
    float *data[32] = {0};
    int64_t sizes[32];
    int n = 0;
    for (int i = 0; i < nt; i++) {
        if (skip && !strcmp(ts[i].name, skip)) continue;
        int64_t shape[2] = {ts[i].r, ts[i].c};
        if (fat && strstr(ts[i].name, "linear_fc1.weight")) shape[0] = 40;
        ptdp__pkw_str(&w, rename && !strcmp(ts[i].name, rename) ? "decoder.layers.0.mlp.gate.weight"
                                                                : ts[i].name);
        ptdp__pkw_tensor_f32(&w, ts[i].nd, shape);
        sizes[n] = shape[0] * (ts[i].nd == 2 ? shape[1] : 1);
        data[n] = calloc((size_t)sizes[n], sizeof(float));
        for (int64_t k = 0; k < sizes[n]; k++) data[n][k] = 0.01f * (float)((k * 7 + i) % 13);
        n++;
    }
    ptdp__pkw_dict_end(&w);
    ptdp__pkw_dict_end(&w);
    PTDP_ASSERT(ptdp__pkw_finish(&w) == PTDP_OK);
    snprintf(p, sizeof p, "%s/iter_0000001/mp_rank_00/model_optim_rng.pt", dir);
    ptdp__zipw *z;
    PTDP_ASSERT(ptdp__zipw_open(&z, p) == PTDP_OK);
    PTDP_ASSERT(ptdp__zipw_add(z, "model_optim_rng/data.pkl", w.buf, w.len) == PTDP_OK);
    for (int i = 0; i < n; i++) {
        char en[64];
        snprintf(en, sizeof en, "model_optim_rng/data/%d", i);
        PTDP_ASSERT(ptdp__zipw_add(z, en, data[i], sizeof(float) * (size_t)sizes[i]) == PTDP_OK);
        free(data[i]);
    }
    PTDP_ASSERT(ptdp__zipw_close(z, 1) == PTDP_OK);
    free(w.buf);
    snprintf(p, sizeof p, "%s/latest_checkpointed_iteration.txt", dir);
    FILE *f = fopen(p, "w");
    fputs("1\n", f);
    fclose(f);
}

static void test_import(void) {
    char dir[64], out[80];
    snprintf(dir, sizeof dir, "/tmp/ptdp_test_meg_%d", (int)getpid());
    snprintf(out, sizeof out, "%s.out", dir);
    ptdp_megatron_import_params ip = ptdp_megatron_import_default_params();
    write_tiny(dir, NULL, NULL, 0, NULL, NULL);
    CHECK_OK(ptdp_megatron_import(dir, out, &ip, NULL));
    ptdp_gpt_config cfg;
    CHECK_OK(ptdp_ckpt_read_config(out, &cfg));
    CHECK(cfg.num_layers == 1 && cfg.hidden == 8 && cfg.heads == 2 && cfg.vocab == 16);
    static const struct {
        const char *skip, *rename;
        int fat;
        const char *arg, *val;
        int code;
        const char *msg;
    } bad[] = {
        {"decoder.layers.0.mlp.linear_fc2.bias", NULL, 0, NULL, NULL, PTDP_EFORMAT,
         "tensor 'layers.0.mlp.dense_4h_to_h.bias' was not found"},
        {NULL, "decoder.layers.0.mlp.linear_fc1.bias", 0, NULL, NULL, PTDP_EUNSUPPORTED,
         "tensor 'decoder.layers.0.mlp.gate.weight' is not part of a GPT model"},
        {NULL, NULL, 1, NULL, NULL, PTDP_EFORMAT,
         "'decoder.layers.0.mlp.linear_fc1.weight' has shape [40, 8] but the model"},
        /* the Llama family's args over a GPT's tensors: args and tensors disagree */
        {NULL, NULL, 0, "swiglu", NULL, PTDP_ECONFIG,
         "--swiglu with biases on the linear layers is not supported"},
        {NULL, NULL, 0, "untie_embeddings_and_output_weights", NULL, PTDP_EFORMAT,
         "ptdp's tensor 'output_layer.weight' was not found"},
        {NULL, NULL, 0, "position_embedding_type", "rope", PTDP_EFORMAT,
         "tensor 'embedding.position_embeddings.weight' (ptdp's "
         "embedding.position_embeddings.weight) is not part of the model the checkpoint's args "
         "describe"},
        {NULL, NULL, 0, "normalization", "RMSNorm", PTDP_EFORMAT,
         "tensor 'decoder.layers.0.input_layernorm.bias' (ptdp's "
         "layers.0.input_layernorm.bias) is not part of the model"},
        {NULL, NULL, 0, "position_embedding_type", "alibi", PTDP_EUNSUPPORTED,
         "position_embedding_type is 'alibi'"},
        {NULL, NULL, 0, "normalization", "LayerNorm1P", PTDP_EUNSUPPORTED, "'LayerNorm1P'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_tiny(dir, bad[i].skip, bad[i].rename, bad[i].fat, bad[i].arg, bad[i].val);
        char o2[96];
        snprintf(o2, sizeof o2, "%s.bad%zu", dir, i);
        CHECK_ERR(ptdp_megatron_import(dir, o2, &ip, NULL), bad[i].code, bad[i].msg);
        struct stat st;
        CHECK(stat(o2, &st) != 0); /* nothing written */
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, out);
    CHECK(system(cmd) == 0);
}

int main(void) {
    test_round_trip();
    test_fixture();
    test_inert();
    test_malformed();
    test_mutations();
    test_import();
    return test_done("test_megatron");
}
