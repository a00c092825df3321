/* cli.h - the `ptdp <command>` entry points. Each command parses its own
 * flags, prints one clear message on bad input and returns the process exit
 * status (0 ok, 1 runtime failure, 2 bad usage). Only cli/ exits. */
#ifndef PTDP_CLI_H
#define PTDP_CLI_H

#include <stdio.h>

#include "comm/comm.h"

int ptdp_cmd_train(int argc, char **argv);
int ptdp_cmd_export(int argc, char **argv);
int ptdp_cmd_tokenize(int argc, char **argv);
int ptdp_cmd_preprocess(int argc, char **argv);
int ptdp_cmd_schedule(int argc, char **argv);
int ptdp_cmd_generate(int argc, char **argv);
int ptdp_cmd_checkpoint(int argc, char **argv);

/* Opens the GPT-2 BPE tokenizer from --vocab-file/--merge-file, printing
 * one error naming the flag; returns an exit status (0 ok). */
struct ptdp_tokenizer;
int ptdp__cli_open_tokenizer(struct ptdp_tokenizer **tok, const char *vocab, const char *merges);

/* Unless OMP_NUM_THREADS is set, shares the node's cores between the ranks
 * running on it (every rank would otherwise start one thread per core). */
void ptdp__cli_set_threads(const ptdp_comm *comm);
/* Parses a command's flags: returns -1 to go on, or the exit status after
 * printing the usage (--help: 0) or one error line (2). */
int ptdp__cli_parse(ptdp_opt *opts, int nopts, int argc, char **argv,
                    void (*usage)(FILE *f, const ptdp_opt *opts, int nopts));
/* The config.json path beside a weights file (same directory). */
void ptdp__cli_config_json_path(const char *weights, char *buf, size_t cap);

#endif
