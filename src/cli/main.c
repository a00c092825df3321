/* main.c - `ptdp <command> [flags]`: dispatch to the commands in cli/, and
 * `ptdp --version` (what this binary is and what it can use here). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "ptdp_revision.h" /* PTDP_GIT_REVISION, written by the build (cmake/revision.cmake) */

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
    {"checkpoint", ptdp_cmd_checkpoint,
     "inspect (info), check (verify), or convert Megatron-LM checkpoints (import-megatron, export-megatron)"},
    {"plot", ptdp_cmd_plot, "draw --log-jsonl files (loss, lr, grad norm, tokens/s) as SVG"},
    {"generate", ptdp_cmd_generate,
     "sample text from a model (KV cache; tensor parallel under mpirun)"},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: ptdp <command> [flags]    (ptdp <command> --help for its flags; ptdp --version)\n\n"
        "ptdp trains GPT models with Megatron-LM's PTD-P parallelism, in C.\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nexample: ptdp train --mock-data --num-layers 2 --hidden-size 128 "
               "--num-attention-heads 4 --seq-length 64 --train-iters 20 --lr 1e-3\n"
               "         mpirun -np 8 ptdp train ... --tensor-model-parallel-size 2 "
               "--pipeline-model-parallel-size 2   (d = 8 / (t x p) = 2)\n");
}

/* The version (CMakeLists.txt's project version), the git revision of the
 * build, the compute backends compiled in, and the instruction-set
 * extensions this CPU reports at run time (oneDNN picks its kernels by
 * them; ptdp's own kernels need AVX2/FMA, the build's baseline). */
static int version(void) {
    printf("ptdp %s (git %s)\n", PTDP_VERSION, PTDP_GIT_REVISION);
    printf("backends: cpu (GEMM: onednn, openblas)%s\n",
           PTDP_CUDA_BUILT ? ", cuda (--device cuda)"
                           : "; cuda not built (no nvcc found, or -DPTDP_CUDA=OFF)");
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const struct {
        const char *name;
        int has;
    } isa[] = {
        {"avx2", __builtin_cpu_supports("avx2")},
        {"f16c", __builtin_cpu_supports("f16c")},
        {"avx512f", __builtin_cpu_supports("avx512f")},
        {"avx512_bf16", __builtin_cpu_supports("avx512bf16")},
    };
    printf("cpu (at run time):");
    for (size_t i = 0; i < sizeof isa / sizeof isa[0]; i++)
        printf(" %s%s", isa[i].has ? "" : "no-", isa[i].name);
    printf("\n");
#else
    printf("cpu (at run time): not an x86 processor\n");
#endif
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--version")) return version();
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
