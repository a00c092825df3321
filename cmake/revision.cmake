# revision.cmake - run at every build (cmake -DSRC=<source dir> -DOUT=<header>
# -P revision.cmake): writes OUT defining PTDP_GIT_REVISION, the source tree's
# git commit (12 hex digits, "-dirty" with uncommitted changes to tracked
# files) or "unknown" outside git. OUT is rewritten only when it changes, so
# an unchanged tree rebuilds nothing.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE rev RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rc EQUAL 0 OR rev STREQUAL "")
  set(rev "unknown")
else()
  execute_process(COMMAND git -C "${SRC}" diff --quiet HEAD --
                  RESULT_VARIABLE dirty OUTPUT_QUIET ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    set(rev "${rev}-dirty")
  endif()
endif()
file(WRITE "${OUT}.tmp" "#define PTDP_GIT_REVISION \"${rev}\"\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
