/* common.c - small pieces shared by the commands. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

void ptdp__cli_set_threads(const ptdp_comm *c) {
    if (getenv("OMP_NUM_THREADS")) return;
    int local = ptdp_comm_node_size(c);
    int th = omp_get_num_procs() / local;
    omp_set_num_threads(th < 1 ? 1 : th);
}

void ptdp__cli_config_json_path(const char *weights, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", weights);
    char *slash = strrchr(buf, '/');
    char *name = slash ? slash + 1 : buf;
    snprintf(name, cap - (size_t)(name - buf), "config.json");
}

int ptdp__cli_parse(ptdp_opt *opts, int nopts, int argc, char **argv,
                    void (*usage)(FILE *f, const ptdp_opt *opts, int nopts)) {
    int help = 0;
    if (ptdp_opts_parse(opts, nopts, argc, argv, &help)) {
        ptdp_log_error("%s", ptdp_last_error());
        return 2;
    }
    if (help) {
        usage(stdout, opts, nopts);
        return 0;
    }
    return -1;
}
