/* cmd_train.c - placeholder, replaced below */
#include "cli/cli.h"
int ptdp_cmd_train(int argc, char **argv) { (void)argc; (void)argv; return 2; }
int ptdp_cmd_export(int argc, char **argv) { (void)argc; (void)argv; return 2; }
