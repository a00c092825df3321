/* head.c - the ends of the model: the first stage's vocabulary-parallel
 * embedding (a masked lookup in this rank's rows of the word embedding,
 * the g all-reduce or, with sequence parallelism, reduce-scatter, position
 * embeddings unless rotary ones replace them) and the last stage's loss head
 * (final norm, logits against the tied embedding or, untied, the output
 * layer, vocabulary-parallel cross-entropy and its backward). Not here: the embedding dropout and
 * the order of the chunk's pieces (gpt.c). */
#include "model/model.h"
#include "model/model_internal.h"

/* With sequence parallelism the lookup's partial sums over the vocabulary
 * slices are reduce-scattered (each rank keeps its positions [s0, s0+s/t)),
 * and only those positions' embeddings are added: wpe's gradient then holds
 * this rank's rows only, summed over the tensor group after the flush like
 * every replicated parameter's (trainer.c). */
void ptdp__gpt_embed_fwd(ptdp_gpt_chunk *c, ptdp__slot_act *sa) {
    ptdp_backend *be = c->be;
    const int64_t N = c->N, h = c->h, s = c->cfg->seq_length, b = c->job->micro_batch;
    if (c->sp) {
        be->embed_fwd(be, sa->tokens, s + 1, c->P.wte, c->v0, c->Vl, c->tmp, s, b, h);
        ptdp__sp_scatter(c, c->tmp, sa->x[0]);
    } else {
        be->embed_fwd(be, sa->tokens, s + 1, c->P.wte, c->v0, c->Vl, sa->x[0], s, b, h);
        ptdp__tp_g_fwd(c, sa->x[0], N * h);
    }
    if (c->P.wpe) /* none with rotary embeddings */
        be->pos_add_fwd(be, sa->x[0], c->P.wpe + c->s0 * h, c->Ns / b, b, h);
}

void ptdp__gpt_embed_bwd(ptdp_gpt_chunk *c, ptdp__slot_act *sa) {
    ptdp_backend *be = c->be;
    const int64_t h = c->h, s = c->cfg->seq_length, b = c->job->micro_batch;
    if (c->G.wpe) be->pos_add_bwd(be, c->dres, c->G.wpe + c->s0 * h, c->Ns / b, b, h);
    const float *dx = c->sp ? ptdp__sp_gather(c, c->dres) : c->dres;
    be->embed_bwd(be, sa->tokens, s + 1, dx, c->G.wte, c->v0, c->Vl, s, b, h);
}

/* Returns the final LayerNorm's output over the whole sequence [s, b, h]
 * (with sequence parallelism gathered into c->gath, where it stays for the
 * backward). */
static const float *head_ln(ptdp_gpt_chunk *c, const float *xL) {
    ptdp__norm_fwd(c, xL, c->P.lnf_w, c->P.lnf_b, c->lnf_out, c->lnf_mean, c->lnf_rstd, c->Ns);
    return c->sp ? ptdp__sp_gather(c, c->lnf_out) : c->lnf_out;
}

void ptdp__head_logits(ptdp_gpt_chunk *c, const float *xL) {
    const float *ln = head_ln(c, xL);
    c->be->gemm(c->be, 0, 1, c->N, c->Vl, c->h, 1.0f, ln, c->h, c->P.out_w, c->h, 0.0f, c->logits,
                c->Vl);
}

/* Loss head and its backward: leaves d(loss)/d(x_L) in sa->x[nl]. The
 * vocabulary-parallel cross-entropy never gathers logits: three all-reduces
 * of [s, b] values (max, target logit, sum of exponentials). */
void ptdp__head_fwd_bwd(ptdp_gpt_chunk *c, ptdp__slot_act *sa, float loss_scale, double *loss_sum) {
    ptdp_backend *be = c->be;
    const ptdp_gpt_config *cfg = c->cfg;
    const int64_t N = c->N, h = c->h, Vl = c->Vl, s = cfg->seq_length, b = c->job->micro_batch;
    float *xL = sa->x[c->nl];
    const int32_t *targets = sa->tokens + 1;

    const float *ln = head_ln(c, xL);
    be->head_logits(be, ln, c->P.out_w, h, c->logits, c->gmax, N, Vl, c->v0, cfg->vocab);
    ptdp_allreduce_max_f32(c->p.tp, c->gmax, N);
    /* from here c->logits holds exp(logit - max), the backward's input */
    be->xent_sums(be, c->logits, c->gmax, targets, s + 1, c->sumexp, c->tgt, s, b, Vl, c->v0,
                  cfg->vocab);
    ptdp_allreduce_sum_f32(c->p.tp, c->tgt, N);
    ptdp_allreduce_sum_f32(c->p.tp, c->sumexp, N);
    be->xent_loss(be, c->sumexp, c->gmax, c->tgt, c->loss, N);
    const int mask = c->job->eod_mask_loss; /* optional op: only such runs call it */
    if (mask) be->mask_rows(be, c->loss, 1, sa->tokens, s + 1, s, b, (int32_t)c->job->eod_token);
    *loss_sum = be->sum(be, c->loss, N);
    if (!c->training) return;

    /* dwte += dl^T ln and d(ln) = dl wte, dl the logits' gradient */
    const ptdp_xent_grad xg = {c->sumexp,
                               c->gmax,
                               targets,
                               s + 1,
                               s,
                               b,
                               Vl,
                               c->v0,
                               cfg->vocab,
                               loss_scale,
                               mask ? sa->tokens : NULL,
                               (int32_t)c->job->eod_token};
    be->head_bwd(be, c->logits, &xg, ln, c->P.out_w, h, c->G.out_w, c->sp ? c->tmp : c->dtmp);
    if (c->sp) /* f's backward: reduce-scatter into this rank's rows */
        ptdp__sp_scatter(c, c->tmp, c->dtmp);
    else
        ptdp__tp_f_bwd(c, c->dtmp, N * h);
    const int64_t Ns = c->Ns;
    be->zero(be, c->dres, Ns * h);
    ptdp__norm_bwd(c, c->dtmp, xL, c->P.lnf_w, c->lnf_mean, c->lnf_rstd, c->dres, c->G.lnf_w,
                   c->G.lnf_b, Ns);
    be->copy(be, xL, c->dres, Ns * h);
}
