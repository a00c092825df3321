/* model_internal.h - shared by the .c files of src/model only. */
#ifndef PTDP_MODEL_INTERNAL_H
#define PTDP_MODEL_INTERNAL_H

#include "model/model.h"

#define PTDP__MAX_SPECS 4096

/* The parameters of one transformer layer, in flat-buffer order:
 * X(ptdp_layer_ptrs field, name after "layers.i.", role, ndim, global dim0,
 *   global dim1, split, init). h and f (the MLP width) are the caller's
 * variables. spec.c builds the specs from it, gpt.c the pointers. */
#define PTDP__LAYER_PARAMS(X)                                                                                  \
    X(ln1_w, "input_layernorm.weight", PTDP_ROLE_LAYERNORM, 1, h, 0, PTDP_SPLIT_NONE, PTDP_INIT_ONE)           \
    X(ln1_b, "input_layernorm.bias", PTDP_ROLE_LAYERNORM, 1, h, 0, PTDP_SPLIT_NONE, PTDP_INIT_ZERO)            \
    X(qkv_w, "self_attention.query_key_value.weight", PTDP_ROLE_WEIGHT, 2, 3 * h, h, PTDP_SPLIT_DIM0,           \
      PTDP_INIT_NORMAL)                                                                                        \
    X(qkv_b, "self_attention.query_key_value.bias", PTDP_ROLE_BIAS, 1, 3 * h, 0, PTDP_SPLIT_DIM0, PTDP_INIT_ZERO) \
    X(proj_w, "self_attention.dense.weight", PTDP_ROLE_WEIGHT, 2, h, h, PTDP_SPLIT_DIM1, PTDP_INIT_SCALED)     \
    X(proj_b, "self_attention.dense.bias", PTDP_ROLE_BIAS, 1, h, 0, PTDP_SPLIT_NONE, PTDP_INIT_ZERO)           \
    X(ln2_w, "post_attention_layernorm.weight", PTDP_ROLE_LAYERNORM, 1, h, 0, PTDP_SPLIT_NONE, PTDP_INIT_ONE)  \
    X(ln2_b, "post_attention_layernorm.bias", PTDP_ROLE_LAYERNORM, 1, h, 0, PTDP_SPLIT_NONE, PTDP_INIT_ZERO)   \
    X(fc1_w, "mlp.dense_h_to_4h.weight", PTDP_ROLE_WEIGHT, 2, f, h, PTDP_SPLIT_DIM0, PTDP_INIT_NORMAL)         \
    X(fc1_b, "mlp.dense_h_to_4h.bias", PTDP_ROLE_BIAS, 1, f, 0, PTDP_SPLIT_DIM0, PTDP_INIT_ZERO)               \
    X(fc2_w, "mlp.dense_4h_to_h.weight", PTDP_ROLE_WEIGHT, 2, h, f, PTDP_SPLIT_DIM1, PTDP_INIT_SCALED)         \
    X(fc2_b, "mlp.dense_4h_to_h.bias", PTDP_ROLE_BIAS, 1, h, 0, PTDP_SPLIT_NONE, PTDP_INIT_ZERO)
enum {
#define PTDP__LAYER_PARAM_COUNT(field, ...) +1
    PTDP__LAYER_NPARAMS = 0 PTDP__LAYER_PARAMS(PTDP__LAYER_PARAM_COUNT)
#undef PTDP__LAYER_PARAM_COUNT
};

typedef struct {
    ptdp_param_spec v[PTDP__MAX_SPECS];
    int n;
    int64_t total; /* floats, aligned per tensor */
    int wte, wpe, lnf; /* spec indices or -1 */
    int layer0;        /* spec index of the first layer's first parameter; layer i's
                          parameters are PTDP__LAYER_NPARAMS specs from
                          layer0 + i * PTDP__LAYER_NPARAMS, in PTDP__LAYER_PARAMS order */
} ptdp__spec_list;

void ptdp__build_specs(ptdp__spec_list *L, const ptdp_gpt_config *cfg, int64_t l0, int64_t l1, int pre,
                       int post, int t, int tp, int64_t numel_multiple);
void ptdp__init_spec(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int tp, float *dst);

#endif
