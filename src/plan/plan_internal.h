/* plan_internal.h - shared by the files of src/plan only (and its tests). */
#ifndef PTDP_PLAN_INTERNAL_H
#define PTDP_PLAN_INTERNAL_H

#include "plan/plan.h"

/* ptdp_plan_estimate_layout, except that with time_if_oom 0 it returns
 * PTDP_OK after the memory model when the layout does not fit in the
 * device's memory (est then holds memory only: the search's rejections). */
int ptdp__plan_estimate(const ptdp_cluster *c, const ptdp_plan_job *job, const ptdp_plan_layout *L,
                        ptdp_plan_estimate *est, int time_if_oom);

#endif
