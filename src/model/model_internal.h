/* model_internal.h - shared between spec.c and gpt.c only. */
#ifndef PTDP_MODEL_INTERNAL_H
#define PTDP_MODEL_INTERNAL_H

#include "model/model.h"

#define PTDP__MAX_SPECS 4096

typedef struct {
    ptdp_param_spec v[PTDP__MAX_SPECS];
    int n;
    int64_t total; /* floats, aligned per tensor */
    int wte, wpe, lnf; /* spec indices or -1 */
} ptdp__spec_list;

void ptdp__build_specs(ptdp__spec_list *L, const ptdp_gpt_config *cfg, int64_t l0, int64_t l1, int pre,
                       int post, int t, int tp, int64_t numel_multiple);
void ptdp__init_spec(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int tp, float *dst);

#endif
