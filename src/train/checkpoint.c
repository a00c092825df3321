/* checkpoint.c - a trainer's checkpoints: what the trainer hands to
 * src/ckpt (its chunks, their optimizers, the job's model, batch, LR
 * schedule and loss scaler) to save and load, and the swap of the fp32
 * master weights into the model's parameters for a write. The file format
 * and the resharding are src/ckpt's (docs/checkpoint-format.md). */
#include "train/train_internal.h"

void ptdp_trainer_full_precision(ptdp_trainer *tr, int on) {
    for (int c = 0; c < tr->v; c++) {
        if (!tr->opts[c].master) continue;
        if (on) {
            ptdp_optim_master_to_params(&tr->opts[c]);
            ptdp_ddp_gather_params(tr->ddp[c]);
        } else {
            ptdp_optim_round_params(&tr->opts[c], ptdp_gpt_chunk_numel(tr->chunks[c]));
        }
    }
}

int ptdp_trainer_save(ptdp_trainer *tr, const char *dir, int64_t consumed_samples, int overwrite) {
    const ptdp_job *j = tr->job;
    ptdp_ckpt_meta meta = {.iteration = tr->iteration,
                           .consumed_samples = consumed_samples,
                           .optimizer_step = tr->opts[0].step,
                           .cfg = &j->model,
                           .micro_batch = j->micro_batch,
                           .global_batch = j->global_batch,
                           .lr = &tr->lr,
                           .adam = &j->adam,
                           .v = tr->v,
                           .zero = j->distributed_optimizer,
                           .scaler = &tr->scaler,
                           .overwrite = overwrite};
    /* checkpoints hold the fp32 master weights whatever the precision */
    ptdp_trainer_full_precision(tr, 1);
    int rc = ptdp_ckpt_save(dir, &meta, tr->chunks, tr->opts, tr->v, tr->p.comm);
    ptdp_trainer_full_precision(tr, 0);
    return rc;
}

int ptdp_trainer_load(ptdp_trainer *tr, const char *dir, int load_optim, int restore_iteration,
                      ptdp_ckpt_loaded *out) {
    int rc = ptdp_ckpt_load(dir, load_optim, &tr->job->model, tr->chunks, tr->opts, tr->v,
                            tr->p.comm, out);
    if (rc == PTDP_OK && out->found && restore_iteration) tr->iteration = out->iteration;
    /* fp16: the dynamic scaler goes on where it was (with the optimizer state) */
    if (rc == PTDP_OK && out->found && load_optim && out->has_scaler && tr->scaler.dynamic) {
        tr->scaler.scale = out->loss_scale;
        tr->scaler.growth_tracker = out->growth_tracker;
        tr->scaler.hysteresis_tracker = (int)out->hysteresis_tracker;
    }
    for (int c = 0; rc == PTDP_OK && out->found && c < tr->v; c++) /* fp32 values: the masters */
        ptdp_optim_take_master(&tr->opts[c], ptdp_gpt_chunk_numel(tr->chunks[c]));
    return rc;
}
