/* test_llm.c: the llm agent's parts that need no server: kernel extraction from model replies
 * (fences, <think>, several blocks, cut-off blocks, and random bytes that must never crash or yield
 * invalid UTF-8), endpoint URL forms, the prompt's sections, the context read from
 * a store (failed children, replies without a kernel, the incumbent the root must beat), and the
 * outcomes of an unreachable endpoint, of a caller that cancels and of a configuration that cannot
 * work. The HTTP paths are tested against a live local server in tests/py/test_llm.py (kiln
 * llm-try) and tests/py/test_optimize_llm.py (kiln optimize --llm-url). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "search/llm.h"

#define SOFTMAX_DIR KILN_SOURCE_DIR "/tests/data/problems/softmax_f32"

static char *extract(const char *text, char *reason) {
    return kiln_llm_extract_kernel(text, strlen(text), reason, 256);
}

static void test_extract_one_block(void **state) {
    (void)state;
    char reason[256];
    char *k = extract("Here it is:\n```c\n// kiln: launch f\nvoid f(const float *x) {}\n```\nbye\n",
                      reason);
    assert_non_null(k);
    assert_string_equal(k, "// kiln: launch f\nvoid f(const float *x) {}\n");
    free(k);
    /* cuda, with extern "C" and no launch line still counts as a kernel */
    k = extract("```cuda\nextern \"C\" __global__ void g(float *y) {}\n```", reason);
    assert_non_null(k);
    assert_non_null(strstr(k, "__global__"));
    free(k);
}

static void test_extract_first_kernel_block(void **state) {
    (void)state;
    char reason[256];
    const char *text =
        "Build with:\n```bash\nmake -j\n```\nThe kernel:\n~~~cpp\n//   kiln:   launch "
        "k1 grid=n block=1\nvoid k1() {}\n~~~\nand another\n```c\n// kiln: launch "
        "k2\nvoid k2() {}\n```\n";
    char *k = extract(text, reason);
    assert_non_null(k);
    assert_non_null(strstr(k, "k1"));
    assert_null(strstr(k, "k2"));
    free(k);
    /* a longer fence holds a shorter one inside */
    k = extract("````c\n// kiln: launch f\n/* ``` in a comment */\nvoid f() {}\n````\n", reason);
    assert_non_null(k);
    assert_non_null(strstr(k, "in a comment"));
    free(k);
}

static void test_extract_no_kernel(void **state) {
    (void)state;
    char reason[256];
    assert_null(extract("Use shared memory and warp shuffles; it will be faster.", reason));
    assert_string_equal(reason, "no fenced code block in the reply");
    assert_null(extract("```python\nprint('hi')\n```\n", reason));
    assert_non_null(strstr(reason, "none of them a kernel"));
    assert_null(extract("```c\n   \n```\n", reason));
    assert_null(extract("", reason));
    assert_null(extract("inline ```c kiln_kernel``` is not a fence", reason));
    assert_null(kiln_llm_extract_kernel(NULL, 10, reason, sizeof reason));
}

static void test_extract_think(void **state) {
    (void)state;
    char reason[256];
    const char *text = "<think>maybe\n```c\n// kiln: launch draft\nvoid draft() {}\n```\nno</think>"
                       "Final:\n```c\n// kiln: launch final\nvoid final_() {}\n```";
    char *k = extract(text, reason);
    assert_non_null(k);
    assert_non_null(strstr(k, "final"));
    assert_null(strstr(k, "draft"));
    free(k);
    /* an unclosed think hides everything after it */
    assert_null(extract("<think>```c\n// kiln: launch f\nvoid f() {}\n```", reason));
}

static void test_extract_unclosed_block(void **state) {
    (void)state;
    char reason[256];
    /* a model that forgot the closing fence at the very end still handed in its kernel (a reply cut
     * off by max_tokens is refused by kiln_llm_propose, which sees finish_reason) */
    char *k = extract("```c\n// kiln: launch f\nvoid f() {}\n", reason);
    assert_non_null(k);
    assert_non_null(strstr(k, "void f()"));
    free(k);
}

static int valid_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        if (!n || (*p >= 0x80 && *p < 0xC2))
            return 0;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += n;
    }
    return 1;
}

/* Random bytes, biased towards the pieces the parser looks for, must never crash, and whatever
 * comes out is valid UTF-8 without NUL, or NULL with a reason. */
static void test_extract_random_bytes(void **state) {
    (void)state;
    static const char *pieces[] = {"```",
                                   "~~~",
                                   "\n",
                                   "// kiln: launch ",
                                   "<think>",
                                   "</think>",
                                   "extern \"C\"",
                                   "kiln_kernel",
                                   "\xff\xfe",
                                   "\xe2\x82",
                                   "````c\n",
                                   " ",
                                   "\0",
                                   "__global__",
                                   "\xf4\x90\x80\x80",
                                   "c\n"};
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    int kernels = 0;
    char *buf = malloc(8192);
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = 0, want;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        want = (size_t)(x % 4096);
        while (len < want) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (x % 3 == 0) {
                const char *p = pieces[(x >> 8) % (sizeof pieces / sizeof pieces[0])];
                size_t n = p[0] ? strlen(p) : 1;
                if (len + n > 8192)
                    break;
                memcpy(buf + len, p, n);
                len += n;
            } else {
                buf[len++] = (char)(x >> 16);
            }
        }
        char reason[128];
        char *k = kiln_llm_extract_kernel(buf, len, reason, sizeof reason);
        if (k) {
            kernels++;
            assert_true(valid_utf8(k));
            free(k);
        } else {
            assert_true(reason[0] != 0);
        }
    }
    free(buf);
    /* the bias makes some of them kernels: both paths were exercised */
    assert_true(kernels > 0);
}

static void test_endpoint_forms(void **state) {
    (void)state;
    struct {
        const char *base, *suffix, *want;
    } cases[] = {
        {"http://127.0.0.1:8000", "chat/completions", "http://127.0.0.1:8000/v1/chat/completions"},
        {"http://127.0.0.1:8000/", "chat/completions", "http://127.0.0.1:8000/v1/chat/completions"},
        {"http://127.0.0.1:8000/v1", "chat/completions",
         "http://127.0.0.1:8000/v1/chat/completions"},
        {"http://h:11434/v1/", "models", "http://h:11434/v1/models"},
        {"http://h/v1/chat/completions", "chat/completions", "http://h/v1/chat/completions"},
        {"http://h/v1/chat/completions", "models", "http://h/v1/models"},
        {"https://api.example.com/openai/v1beta", "chat/completions",
         "https://api.example.com/openai/v1beta/chat/completions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = kiln_llm_endpoint(cases[i].base, cases[i].suffix);
        assert_string_equal(got, cases[i].want);
        free(got);
    }
}

static void test_prompt_sections(void **state) {
    (void)state;
    kiln_problem *p = NULL;
    kiln_err err;
    assert_int_equal(kiln_problem_load(SOFTMAX_DIR, &p, &err), KILN_OK);
    kiln_llm_feedback fb[2] = {
        {7, "compile_error", "compiler output (tail):\nk.c:3: error: 'row_sum' undeclared\n"},
        {0, "no_kernel", "your reply held no kernel: no fenced code block in the reply\n"},
    };
    kiln_llm_context ctx = {0};
    ctx.problem = p;
    ctx.backend = "cpu";
    ctx.device_name = "Test CPU";
    ctx.n_sms = 8;
    ctx.ceiling_gbps = 100;
    ctx.ceiling_gflops = 500;
    ctx.node_candidate_id = 5;
    ctx.node_source = "// kiln: launch softmax_rows\nvoid softmax_rows() {}\n";
    ctx.node_time_us = 12.5;
    ctx.node_sol_pct = 3.25;
    ctx.ref_time_us = 20;
    ctx.n_feedback = 2;
    ctx.feedback = fb;
    char *prompt = kiln_llm_prompt(&ctx);
    const char *must[] = {"# Problem `softmax_f32`",
                          "torch.softmax",
                          "`rows` (var)",
                          "void NAME(const float* x, float* y, int64_t rows, int64_t cols)",
                          "Test CPU",
                          "100.0 GB/s",
                          "candidate 5",
                          "12.500 us",
                          "3.25% of the speed",
                          "Candidate 7: compile_error",
                          "'row_sum' undeclared",
                          "A reply: no_kernel",
                          "The candidate ABI",
                          "rows=5 cols=4097",
                          "speed of light"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        if (!strstr(prompt, must[i]))
            fail_msg("the prompt lacks \"%s\":\n%s", must[i], prompt);
    /* the flops ceiling the gate uses, named; NULL: the fp32 FMA rate */
    if (!strstr(prompt, "flops 500.0 GFLOP/s (fp32 FMA (measured))"))
        fail_msg("the prompt lacks the FMA ceiling:\n%s", prompt);
    free(prompt);
    ctx.ceiling_gflops_of = "bfloat16 tensor cores (arch table)";
    p->flops = 1e9; /* declared flops bind each workload's speed of light: 1e9 / 500e9 s */
    prompt = kiln_llm_prompt(&ctx);
    if (!strstr(prompt, "flops 500.0 GFLOP/s (bfloat16 tensor cores (arch table))"))
        fail_msg("the prompt lacks the tensor-core ceiling:\n%s", prompt);
    if (!strstr(prompt,
                "rows=5 cols=4097: 163880 bytes, 1000000000 flops, speed of light 2e+03 us"))
        fail_msg("the prompt's speed of light leaves out the flops:\n%s", prompt);
    p->flops = -1;
    /* the root: a kernel from scratch */
    ctx.node_source = NULL;
    ctx.n_feedback = 0;
    free(prompt);
    prompt = kiln_llm_prompt(&ctx);
    assert_non_null(strstr(prompt, "There is no kernel for this problem yet"));
    assert_null(strstr(prompt, "failed (most recent first)"));
    free(prompt);
    kiln_problem_free(p);
}

static int always(void *arg) {
    (void)arg;
    return 1;
}

static void test_unreachable_and_bad_config(void **state) {
    (void)state;
    kiln_problem *p = NULL;
    kiln_err err;
    assert_int_equal(kiln_problem_load(SOFTMAX_DIR, &p, &err), KILN_OK);
    kiln_llm_context ctx = {0};
    ctx.problem = p;
    ctx.backend = "cpu";
    kiln_llm_config cfg;
    kiln_llm_config_default(&cfg);
    char *k = (char *)1;
    kiln_llm_status st;
    /* no url: a configuration error, not an outcome */
    assert_int_equal(kiln_llm_propose(&cfg, &ctx, &k, &st, &err), KILN_ERR_INVALID);
    assert_null(k);
    /* a port nobody listens on: unreachable, after 1 + retries attempts */
    cfg.url = "http://127.0.0.1:1/v1";
    cfg.model = "m";
    cfg.retries = 1;
    cfg.backoff_s = 0.01;
    cfg.connect_timeout_s = 2;
    assert_int_equal(kiln_llm_propose(&cfg, &ctx, &k, &st, &err), KILN_OK);
    assert_null(k);
    assert_int_equal(st.outcome, KILN_LLM_UNREACHABLE);
    assert_int_equal(st.attempts, 2);
    assert_non_null(strstr(st.reason, "127.0.0.1:1"));
    /* a spent budget asks nothing */
    cfg.token_budget = 1;
    cfg.url = "http://127.0.0.1:1/v1";
    kiln_llm_status st2;
    assert_int_equal(kiln_llm_propose(&cfg, &ctx, &k, &st2, &err), KILN_OK);
    /* the unreachable attempt used no tokens, so the budget is not spent yet */
    assert_int_equal(st2.outcome, KILN_LLM_UNREACHABLE);
    assert_string_equal(kiln_llm_outcome_name(KILN_LLM_BUDGET), "budget");
    /* a caller that is stopping: nothing is sent */
    cfg.cancelled = always;
    assert_int_equal(kiln_llm_propose(&cfg, &ctx, &k, &st2, &err), KILN_OK);
    assert_null(k);
    assert_int_equal(st2.outcome, KILN_LLM_CANCELLED);
    assert_int_equal(st2.attempts, 0);
    assert_string_equal(kiln_llm_outcome_name(KILN_LLM_CANCELLED), "cancelled");
    kiln_problem_free(p);
}

static void test_context_from_store(void **state) {
    (void)state;
    char tmpl[] = "/tmp/kiln_test_llm_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    kiln_store *s = NULL;
    kiln_err err;
    assert_int_equal(kiln_store_open(dir, 0, &s, &err), KILN_OK);
    assert_int_equal(kiln_store_version(s), KILN_STORE_SCHEMA_VERSION); /* llm_exchange is in it */
    kiln_store_problem sp = {0, "softmax_f32", SOFTMAX_DIR, -1, 20.0, -1, -1, NULL};
    int64_t pid = 0;
    assert_int_equal(kiln_store_problem_upsert(s, &sp, &pid, &err), KILN_OK);
    kiln_store_candidate c = {0};
    c.problem_id = pid;
    c.agent = "llm";
    c.params = "";
    c.source = "// kiln: launch f\nvoid f() {}\n";
    c.source_hash = c.binary_hash = 11;
    int64_t parent = 0, child = 0, other = 0;
    assert_int_equal(kiln_store_candidate_insert(s, &c, &parent, &err), KILN_OK);
    assert_int_equal(kiln_store_result_insert(
                         s, parent, "ok",
                         "{\"outcome\":\"ok\",\"device\":{\"name\":\"Dev\",\"sms\":4,"
                         "\"ceiling_gbps\":50.0,\"ceiling_gflops\":9.0,\"ceiling_gflops_of\":"
                         "\"bfloat16 tensor cores (arch table)\"},\"summary\":{}}",
                         8.0, 1.0, 40.0, 0.7, &err),
                     KILN_OK);
    c.parent_id = parent;
    c.source = "broken";
    c.source_hash = c.binary_hash = 12;
    assert_int_equal(kiln_store_candidate_insert(s, &c, &child, &err), KILN_OK);
    assert_int_equal(
        kiln_store_result_insert(s, child, "mismatch",
                                 "{\"outcome\":\"mismatch\",\"evidence\":{\"workload_index\":0,"
                                 "\"output\":\"y\",\"n_bad\":21,\"max_abs_err\":0.05},"
                                 "\"workloads\":[{\"axes\":{\"rows\":3,\"cols\":7}}]}",
                                 -1, -1, -1, 0, &err),
        KILN_OK);
    /* a child of the root: not feedback for the node */
    c.parent_id = 0;
    c.source_hash = c.binary_hash = 13;
    assert_int_equal(kiln_store_candidate_insert(s, &c, &other, &err), KILN_OK);
    assert_int_equal(kiln_store_result_insert(s, other, "crashed", "{\"outcome\":\"crashed\"}", -1,
                                              -1, -1, 0, &err),
                     KILN_OK);
    /* a reply for the node that held no kernel */
    char *sql = xasprintf("INSERT INTO llm_exchange (problem_id, parent_id, model, request_json, "
                          "status, reason, created_unix_s) VALUES (%lld, %lld, 'm', '{}', "
                          "'no_kernel', 'no fenced code block in the reply', 1e9)",
                          (long long)pid, (long long)parent);
    sqlite3 *db = NULL; /* written as it was long ago: the row's time is not now */
    assert_int_equal(sqlite3_open(kiln_store_path(s), &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    free(sql);

    kiln_problem *p = NULL;
    assert_int_equal(kiln_problem_load(SOFTMAX_DIR, &p, &err), KILN_OK);
    kiln_llm_context ctx = {0};
    ctx.problem = p;
    ctx.backend = "cpu";
    assert_int_equal(kiln_llm_context_load(s, pid, parent, 6, &ctx, &err), KILN_OK);
    assert_string_equal(ctx.node_source, "// kiln: launch f\nvoid f() {}\n");
    assert_true(ctx.node_time_us == 8.0);
    assert_true(ctx.node_sol_pct == 40.0);
    assert_true(ctx.ref_time_us == 20.0);
    assert_string_equal(ctx.device_name, "Dev");
    assert_true(ctx.ceiling_gbps == 50.0);
    assert_true(ctx.ceiling_gflops == 9.0);
    assert_string_equal(ctx.ceiling_gflops_of, "bfloat16 tensor cores (arch table)");
    assert_int_equal(ctx.n_feedback, 2);
    /* most recent first: the mismatch (now) before the reply (1e9 s after the epoch) */
    assert_int_equal(ctx.feedback[0].candidate_id, child);
    assert_string_equal(ctx.feedback[0].outcome, "mismatch");
    assert_non_null(strstr(ctx.feedback[0].detail, "\"rows\":3"));
    assert_non_null(strstr(ctx.feedback[0].detail, "n_bad: 21"));
    assert_non_null(strstr(ctx.feedback[0].detail, "its source was"));
    assert_string_equal(ctx.feedback[1].outcome, "no_kernel");
    assert_non_null(strstr(ctx.feedback[1].detail, "no fenced code block"));
    assert_int_equal(ctx.best_candidate_id, 0); /* no incumbent yet */
    /* loading again (the root now) resets what came from the store */
    assert_int_equal(kiln_store_incumbent_set(s, pid, parent, &err), KILN_OK);
    assert_int_equal(kiln_llm_context_load(s, pid, 0, 6, &ctx, &err), KILN_OK);
    assert_null(ctx.node_source);
    assert_int_equal(ctx.n_feedback, 1);
    assert_string_equal(ctx.feedback[0].outcome, "crashed");
    /* with an incumbent, the root asks for a new kernel that beats it, not for a first one */
    assert_int_equal(ctx.best_candidate_id, parent);
    assert_true(ctx.best_time_us == 8.0);
    char *prompt = kiln_llm_prompt(&ctx);
    char *want = xasprintf("so far (candidate %lld) takes 8.000 us", (long long)parent);
    assert_non_null(strstr(prompt, want));
    assert_null(strstr(prompt, "There is no kernel for this problem yet"));
    free(want);
    free(prompt);
    kiln_llm_context_clear(&ctx);
    /* a candidate of another problem is refused */
    assert_int_equal(kiln_llm_context_load(s, pid + 1, parent, 6, &ctx, &err), KILN_ERR_INVALID);
    kiln_llm_context_clear(&ctx);
    assert_int_equal(kiln_store_llm_exchange_link(s, 1, child, &err), KILN_OK);
    kiln_problem_free(p);
    kiln_store_close(s);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extract_one_block),
        cmocka_unit_test(test_extract_first_kernel_block),
        cmocka_unit_test(test_extract_no_kernel),
        cmocka_unit_test(test_extract_think),
        cmocka_unit_test(test_extract_unclosed_block),
        cmocka_unit_test(test_extract_random_bytes),
        cmocka_unit_test(test_endpoint_forms),
        cmocka_unit_test(test_prompt_sections),
        cmocka_unit_test(test_unreachable_and_bad_config),
        cmocka_unit_test(test_context_from_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
