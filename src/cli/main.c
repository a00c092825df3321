/* main.c - `ptdp <command> [flags]`: dispatch to the commands in cli/,
 * `ptdp --version` (what this binary is and what it can use here), and how
 * long idle OpenMP threads spin (set before any library starts). */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ptdp_revision.h" /* PTDP_GIT_REVISION, written by the build (cmake/revision.cmake) */

/* How long an OpenMP thread with nothing to do spins before it sleeps, in
 * libgomp's units (one pause instruction and a load, 10-40 ns on current
 * x86). libgomp's default, 300,000 (3-12 ms), keeps a waiting thread on its
 * core through every short wait at a barrier; when another process wants
 * the core (two jobs on one machine, a test suite beside a run) that spin is
 * taken from it at every parallel region, and two 2-thread jobs on 2 cores
 * ran 25 times slower each instead of twice. 1,000 (about 40 us on the
 * 2-core Zen 5) outlasts all but a few of the gaps between the parallel
 * regions of an iteration, so a quiet machine wakes few threads, and hands
 * a contended core over within tens of microseconds. docs/performance.md
 * has the measurements ("Two jobs on one machine"). */
#define PTDP_SPINCOUNT "1000"

/* libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its
 * constructor, before main runs (a change made earlier, from .preinit_array,
 * is undone by glibc's own start-up), so ptdp sets the variable and runs
 * itself again: one exec, before anything else. What the user set wins;
 * commands that run no parallel work skip it. */
static void spin_policy(int argc, char **argv) {
    static const char *const parallel[] = {"train", "generate", "export", "preprocess", "plan"};
    int wanted = 0;
    for (size_t i = 0; argc >= 2 && i < sizeof parallel / sizeof parallel[0]; i++)
        wanted |= !strcmp(argv[1], parallel[i]);
    if (!wanted || getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", PTDP_SPINCOUNT, 0) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("GOMP_SPINCOUNT"); /* no exec (no /proc): libgomp's default */
}

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
    const char *wp = getenv("OMP_WAIT_POLICY"), *sc = getenv("GOMP_SPINCOUNT");
    if (wp || sc)
        printf("OpenMP idle threads: as the environment says (OMP_WAIT_POLICY=%s, "
               "GOMP_SPINCOUNT=%s)\n",
               wp ? wp : "unset", sc ? sc : "unset");
    else
        printf("OpenMP idle threads: spin then sleep, GOMP_SPINCOUNT=%s (ptdp's default; "
               "OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment replace it)\n",
               PTDP_SPINCOUNT);
    return 0;
}

int main(int argc, char **argv) {
    spin_policy(argc, argv);
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
