#!/usr/bin/env bash
# The full invariance matrix (label "full": `make test-full`), see test_matrix.sh.
MATRIX=full exec bash "$PTDP_SRC/tests/test_matrix.sh"
