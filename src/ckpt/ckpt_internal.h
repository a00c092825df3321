/* ckpt_internal.h - what the files of src/ckpt share and nobody else sees:
 * the file primitives of files.c. Each returns PTDP_OK or PTDP_EIO with a
 * message naming the path. */
#ifndef PTDP_CKPT_INTERNAL_H
#define PTDP_CKPT_INTERNAL_H

#include <stdint.h>

/* CRC-32 and size of a whole file. */
int ptdp__ckpt_file_crc(const char *path, uint32_t *crc, int64_t *size);
/* mkdir -p. */
int ptdp__ckpt_mkdir_p(const char *dir);
/* fsync of a directory, so a rename in it is durable (errors ignored). */
void ptdp__ckpt_fsync_dir(const char *dir);
/* Writes text to path through a temporary, fsync and rename. */
int ptdp__ckpt_write_atomic(const char *path, const char *text);

#endif
