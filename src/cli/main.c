/* main.c - `ptdp <command> [flags]`: dispatch to the commands in cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"train", ptdp_cmd_train, "train a GPT model (tensor/pipeline/data parallel under mpirun)"},
    {"export", ptdp_cmd_export, "write weights as Hugging Face GPT-2 safetensors"},
    {"tokenize", ptdp_cmd_tokenize, "GPT-2 BPE: text on stdin to token ids (or --decode)"},
    {"preprocess", ptdp_cmd_preprocess, "text or JSON lines to Megatron .bin/.idx datasets"},
    {"schedule", ptdp_cmd_schedule, "print, simulate or draw a pipeline schedule"},
    {"plan", ptdp_cmd_plan,
     "predict time and memory of every parallel layout on a cluster and pick the best"},
    {"checkpoint", ptdp_cmd_checkpoint, "inspect (info) or check (verify) a training checkpoint"},
    {"generate", ptdp_cmd_generate,
     "sample text from a model (KV cache; tensor parallel under mpirun)"},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: ptdp <command> [flags]    (ptdp <command> --help for its flags)\n\n"
               "ptdp trains GPT models with Megatron-LM's PTD-P parallelism, in C.\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nexample: ptdp train --mock-data --num-layers 2 --hidden-size 128 "
               "--num-attention-heads 4 --seq-length 64 --train-iters 20 --lr 1e-3\n"
               "         mpirun -np 8 ptdp train ... --tensor-model-parallel-size 2 "
               "--pipeline-model-parallel-size 2   (d = 8 / (t x p) = 2)\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "ptdp: error: unknown command '%s'; commands are:", argv[1]);
    for (int i = 0; i < NCOMMANDS; i++) fprintf(stderr, " %s", commands[i].name);
    fprintf(stderr, " (see ptdp --help)\n");
    return 2;
}
