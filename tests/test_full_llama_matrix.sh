#!/usr/bin/env bash
# The full Llama invariance matrix (label "full": `make test-full`), see test_llama_matrix.sh.
MATRIX=full exec bash "$PTDP_SRC/tests/test_llama_matrix.sh"
