/* content_hash.h: a problem's identity, computed from its files (docs/capture.md, "A problem is its
 * content"). Capture writes the hash into definition.json's "kiln": {"content_hash"}; kiln's C side
 * computes it again from the same files by the same recipe (python/kiln/problem.py content_hash is
 * the other implementation, tests/py/test_content_hash.py holds the two together), so a result is
 * filed under what the problem is now, not under what its definition says it was. */
#ifndef KILN_CONTENT_HASH_H
#define KILN_CONTENT_HASH_H

#include "../util/common.h"

/* 32 lower-case hex digits and a NUL. */
#define KILN_CONTENT_HASH_LEN 33

/* The content hash of the problem in problem_dir (definition.json, workload.jsonl and the
 * safetensors files its workloads name). Reads every named tensor's bytes once. KILN_ERR_IO when a
 * file cannot be read, KILN_ERR_FORMAT when one is malformed. */
int kiln_content_hash_dir(const char *problem_dir, char hex[KILN_CONTENT_HASH_LEN], kiln_err *err);

#endif
