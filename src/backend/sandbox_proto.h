/* sandbox_proto.h: the records the gate (sandbox.c) and the cpu sandbox's runner (sandbox_main.c,
 * build/kiln-sandbox) exchange over their socket, and the facts both sides must agree on: where
 * the candidate's buffers lie in the runner and which descriptors it starts with.
 *
 * The socket is an AF_UNIX SOCK_SEQPACKET pair, so every record arrives whole or not at all and a
 * record of the wrong size is seen as such. Every record has a fixed size. The gate writes:
 *   1. one kiln_sbx_setup, then setup.n_maps kiln_sbx_map records (the buffers to map);
 *   2. then, for every launch, one kiln_sbx_call.
 * The runner answers the setup and every call with one kiln_sbx_reply carrying the same seq. After
 * its first reply the runner has run candidate code, so from then on the gate trusts nothing it
 * says beyond "this call is over": a reply of the wrong size, magic or seq, a reply nobody asked
 * for, or status != 0 is a broken protocol. */
#ifndef KILN_SANDBOX_PROTO_H
#define KILN_SANDBOX_PROTO_H

#include <stdint.h>

#include "abi.h"

/* The runner's descriptors: the socket to the gate and the memfd of the buffers (closed once
 * mapped). 1 and 2 are the log; nothing else is open. */
#define KILN_SBX_FD_SOCKET 3
#define KILN_SBX_FD_MEMFD 4

/* Buffers live at KILN_SBX_BASE + their offset in the memfd, inside [KILN_SBX_BASE, KILN_SBX_BASE
 * + span), span a power of two no larger than KILN_SBX_MAX_SPAN. Below 2^45 nothing else is
 * mapped in a 64-bit process (x86-64 and AArch64 place the executable, the heap, libraries and
 * stacks far above it), which lets the seccomp filter refuse every memory-management call on an
 * address below the end of the span: a range that starts under the buffers cannot reach into them
 * either. */
#define KILN_SBX_BASE ((uint64_t)1 << 44)
#define KILN_SBX_MAX_SPAN ((uint64_t)1 << 44)

/* Bumped whenever a record changes, so that a runner left from another build refuses to start. */
#define KILN_SBX_VERSION 2
#define KILN_SBX_MAGIC_SETUP 0x6b6c6e53u
#define KILN_SBX_MAGIC_MAP 0x6b6c6e4du
#define KILN_SBX_MAGIC_CALL 0x6b6c6e43u
#define KILN_SBX_MAGIC_REPLY 0x6b6c6e52u

typedef struct {
    uint32_t magic;
    uint32_t n_maps;      /* kiln_sbx_map records that follow */
    uint64_t span;        /* bytes reserved at KILN_SBX_BASE (a power of two) */
    uint64_t extra_bytes; /* address space the candidate may add (RLIMIT_AS above the setup) */
    uint64_t log_bytes;   /* RLIMIT_FSIZE: the log cannot grow past it */
    uint32_t n_entries;   /* trampolines kiln__call_0 .. kiln__call_{n-1} */
    uint32_t version;     /* KILN_SBX_VERSION */
    char so_path[4096];   /* the checked candidate, dlopen'ed before the filter */
} kiln_sbx_setup;

typedef struct {
    uint32_t magic;
    uint32_t read_only; /* PROT_READ in the runner (the gate's view stays writable) */
    uint64_t offset;    /* in the memfd and from KILN_SBX_BASE; page-aligned */
    uint64_t n_bytes;   /* page-aligned; the page after it stays PROT_NONE */
} kiln_sbx_map;

typedef struct {
    uint32_t magic;
    uint32_t n_launches;
    uint64_t seq;
    uint32_t entry[KILN_MAX_LAUNCHES]; /* trampoline of each launch, in order */
    uint32_t n_params;
    uint32_t reserved;
    /* parameter i, its bytes at the start of the slot (pointers are runner addresses) */
    uint64_t value[KILN_MAX_PARAMS];
} kiln_sbx_call;

enum {
    KILN_SBX_OK = 0,
    KILN_SBX_LOAD_FAILED = 1,  /* dlopen or dlsym failed: detail has dlerror() */
    KILN_SBX_SETUP_FAILED = 2, /* mapping, limits or the filter failed: detail says which */
    KILN_SBX_READY = 3,        /* after a call's OK: its state is put back for the next call */
};

typedef struct {
    uint32_t magic;
    int32_t status; /* KILN_SBX_* */
    uint64_t seq;   /* the call's (0 for the setup) */
    char detail[240];
} kiln_sbx_reply;

#endif
