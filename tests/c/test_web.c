/* test_web.c: the dashboard server's C surface: strict ids, which hosts are loopback, refusing a
 * non-loopback bind unless asked, a port in use, the server in this process and the spawned one
 * (kiln optimize --serve) answering HTTP on a real store, and the same answer after a writer in
 * another process came and went, and the roofline's flops ceiling being the one its problem's speed
 * of light used. (tests/py/test_dashboard.py covers the endpoints and the page.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "web/web_impl.h"

static char *make_run(void) {
    char tmpl[] = "/tmp/kiln_test_web_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    kiln_store *s = NULL;
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_open(dir, 0, &s, &err), KILN_OK);
    kiln_store_problem p = {.name = "softmax",
                            .dir = "/nowhere",
                            .share = 0.5,
                            .eager_us = 10,
                            .compile_us = -1,
                            .sol_us = -1};
    int64_t pid = 0;
    assert_int_equal(kiln_store_problem_upsert(s, &p, &pid, &err), KILN_OK);
    kiln_store_candidate c = {.problem_id = pid,
                              .agent = "geometry",
                              .params = "T=1",
                              .source = "int x;",
                              .source_hash = 1,
                              .binary_hash = 2};
    int64_t cid = 0;
    assert_int_equal(kiln_store_candidate_insert(s, &c, &cid, &err), KILN_OK);
    assert_int_equal(
        kiln_store_result_insert(s, cid, "ok", "{\"outcome\":\"ok\"}", 5, 1, 50, 0.7, &err),
        KILN_OK);
    kiln_store_close(s);
    return xstrdup(dir);
}

static void remove_run(char *dir) {
    char *cmd = xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    free(dir);
}

/* GET path on 127.0.0.1:port; returns the whole reply (status line, headers, body). */
static char *http_get(int port, const char *path) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char *req =
        xasprintf("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", path, port);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    free(req);
    size_t cap = 1 << 16, len = 0;
    char *buf = xmalloc(cap);
    ssize_t n;
    while ((n = read(fd, buf + len, cap - 1 - len)) > 0) {
        len += (size_t)n;
        if (len + 1 == cap)
            buf = xrealloc(buf, cap *= 2);
    }
    buf[len] = 0;
    close(fd);
    return buf;
}

static void *get_run_thread(void *arg) {
    for (int i = 0; i < 4; i++)
        free(http_get(*(int *)arg, "/api/run"));
    return NULL;
}

static void test_ids_are_strict(void **state) {
    (void)state;
    int64_t v = -1;
    assert_int_equal(web_parse_id("42", &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(web_parse_id("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(web_parse_id("9007199254740992", &v), 0); /* 2^53 */
    assert_int_equal(web_parse_id("0009", &v), 0);
    assert_int_equal(v, 9);
    assert_int_equal(web_parse_id("9007199254740993", &v), -2);
    assert_int_equal(web_parse_id("99999999999999999999999999999", &v), -2);
    const char *bad[] = {"", "-1", "+1", "1.5", "0x10", " 1", "1 ", "1e3", "abc", "١"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(web_parse_id(bad[i], &v), -1);
    assert_int_equal(web_parse_id(NULL, &v), -1);
}

static void test_loopback_hosts(void **state) {
    (void)state;
    assert_true(kiln_web_host_is_loopback("127.0.0.1"));
    assert_true(kiln_web_host_is_loopback("127.1.2.3"));
    assert_true(kiln_web_host_is_loopback("::1"));
    assert_true(kiln_web_host_is_loopback("localhost"));
    assert_false(kiln_web_host_is_loopback("0.0.0.0"));
    assert_false(kiln_web_host_is_loopback("::"));
    assert_false(kiln_web_host_is_loopback("8.8.8.8"));
    assert_false(kiln_web_host_is_loopback(""));
    assert_false(kiln_web_host_is_loopback("no such host name.invalid"));
}

static void test_non_loopback_only_when_asked(void **state) {
    (void)state;
    char *run = make_run();
    kiln_web_options o;
    kiln_web_options_default(&o);
    o.run_dir = run;
    o.host = "0.0.0.0";
    o.port = 0;
    kiln_web *w = NULL;
    kiln_err err = {{0}};
    assert_int_equal(kiln_web_start(&o, &w, &err), KILN_ERR_INVALID);
    assert_null(w);
    assert_non_null(strstr(err.msg, "not a loopback address"));
    o.host = "300.1.1.1";
    assert_int_not_equal(kiln_web_start(&o, &w, &err), KILN_OK);
    remove_run(run);
}

static void test_serves_and_stops(void **state) {
    (void)state;
    char *run = make_run();
    kiln_web_options o;
    kiln_web_options_default(&o);
    o.run_dir = run;
    o.port = 0;
    kiln_web *w = NULL;
    kiln_err err = {{0}};
    assert_int_equal(kiln_web_start(&o, &w, &err), KILN_OK);
    int port = kiln_web_port(w);
    assert_true(port > 0);
    char *url = xasprintf("http://127.0.0.1:%d/", port);
    assert_string_equal(kiln_web_url(w), url);
    free(url);
    char *r = http_get(port, "/api/problems");
    assert_non_null(strstr(r, "HTTP/1.1 200"));
    assert_non_null(strstr(r, "\"name\":\"softmax\""));
    assert_non_null(strstr(r, "\"speedup\":2"));
    free(r);
    r = http_get(port, "/api/candidates/7");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
    free(r);
    /* the same port again: a clear error, not a crash */
    kiln_web *w2 = NULL;
    o.port = port;
    assert_int_equal(kiln_web_start(&o, &w2, &err), KILN_ERR_IO);
    assert_non_null(strstr(err.msg, "in use"));
    kiln_web_stop(w);
    kiln_web_stop(NULL);
    remove_run(run);
}

static void test_writers_that_come_and_go_are_seen(void **state) {
    (void)state;
    char *run = make_run();
    /* A writer in another process (as kiln optimize's are), forked before the server's threads
     * exist: on each byte from the pipe it opens the store, adds an event, closes it, answers. */
    int go[2], done[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);
    pid_t child = fork();
    if (child == 0) {
        close(go[1]);
        close(done[0]);
        char b;
        while (read(go[0], &b, 1) == 1) {
            kiln_store *s = NULL;
            kiln_err e;
            int rc = kiln_store_open(run, 0, &s, &e) || kiln_store_event(s, 0, "tick", "x", &e);
            kiln_store_close(s);
            b = rc ? 'n' : 'y';
            if (write(done[1], &b, 1) != 1)
                break;
        }
        _exit(0);
    }
    close(go[0]);
    close(done[1]);
    kiln_web_options o;
    kiln_web_options_default(&o);
    o.run_dir = run;
    o.port = 0;
    kiln_web *w = NULL;
    kiln_err err = {{0}};
    assert_int_equal(kiln_web_start(&o, &w, &err), KILN_OK);
    /* requests at once, so that the pool opens connections while others are open */
    pthread_t t[8];
    int port = kiln_web_port(w);
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, get_run_thread, &port), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) {
        char b = 'w';
        assert_int_equal(write(go[1], &b, 1), 1);
        assert_int_equal(read(done[0], &b, 1), 1);
        assert_int_equal(b, 'y');
        char *r = http_get(kiln_web_port(w), "/api/events?kind=tick");
        int n = 0;
        for (const char *p = r; (p = strstr(p, "\"kind\":\"tick\"")); p++)
            n++;
        assert_int_equal(n, i + 1);
        free(r);
    }
    close(go[1]);
    close(done[0]);
    waitpid(child, NULL, 0);
    kiln_web_stop(w);
    remove_run(run);
}

static void test_spawned_server(void **state) {
    (void)state;
    char *run = make_run();
    kiln_web_options o;
    kiln_web_options_default(&o);
    o.run_dir = run;
    o.port = 0;
    pid_t pid = 0;
    int port = 0;
    kiln_err err = {{0}};
    assert_int_equal(kiln_web_spawn(&o, &pid, &port, &err), KILN_OK);
    assert_true(pid > 0 && port > 0);
    char *r = http_get(port, "/api/run");
    assert_non_null(strstr(r, "HTTP/1.1 200"));
    assert_non_null(strstr(r, "\"candidates\":1"));
    free(r);
    kiln_web_spawn_stop(pid);
    assert_int_equal(kill(pid, 0), -1); /* reaped */
    /* a child that cannot serve says why */
    o.host = "0.0.0.0";
    assert_int_not_equal(kiln_web_spawn(&o, &pid, &port, &err), KILN_OK);
    assert_non_null(strstr(err.msg, "loopback"));
    remove_run(run);
}

/* A problem with one ok result whose device object carries the flops ceiling gflops (of what). */
static int64_t problem_with_device(kiln_store *s, const char *name, double gflops, const char *of,
                                   uint64_t hash) {
    kiln_err err = {{0}};
    kiln_store_problem p = {.name = name,
                            .dir = "/nowhere",
                            .share = 0.5,
                            .eager_us = 10,
                            .compile_us = -1,
                            .sol_us = -1};
    int64_t pid = 0, cid = 0;
    assert_int_equal(kiln_store_problem_upsert(s, &p, &pid, &err), KILN_OK);
    kiln_store_candidate c = {.problem_id = pid,
                              .agent = "geometry",
                              .params = "",
                              .source = name,
                              .source_hash = hash,
                              .binary_hash = hash};
    assert_int_equal(kiln_store_candidate_insert(s, &c, &cid, &err), KILN_OK);
    char *json =
        xasprintf("{\"outcome\":\"ok\",\"device\":{\"name\":\"H\",\"ceiling_gbps\":4800,"
                  "\"ceiling_gflops\":%g,\"ceiling_gflops_of\":\"%s\"},\"workloads\":[{"
                  "\"index\":0,\"min_bytes\":1e6,\"flops\":1e9,\"time_us\":{\"median\":5}}]}",
                  gflops, of);
    assert_int_equal(kiln_store_result_insert(s, cid, "ok", json, 5, 1, 50, 0.7, &err), KILN_OK);
    free(json);
    return pid;
}

static void test_roofline_ceiling_is_the_problems(void **state) {
    (void)state;
    char tmpl[] = "/tmp/kiln_test_web_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    char *run = xstrdup(dir);
    kiln_store *s = NULL;
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_open(run, 0, &s, &err), KILN_OK);
    int64_t gemm =
        problem_with_device(s, "gemm_bf16", 1070530, "bfloat16 tensor cores (arch table)", 21);
    problem_with_device(s, "softmax_f32", 51000, "fp32 FMA (measured)", 22); /* the latest */
    kiln_store_close(s);
    kiln_web_options o;
    kiln_web_options_default(&o);
    o.run_dir = run;
    o.port = 0;
    kiln_web *w = NULL;
    assert_int_equal(kiln_web_start(&o, &w, &err), KILN_OK);
    char *path = xasprintf("/api/roofline?problem=%lld", (long long)gemm);
    char *r = http_get(kiln_web_port(w), path);
    assert_non_null(strstr(r, "HTTP/1.1 200"));
    if (!strstr(r, "\"gflops\":1070530,\"gflops_of\":\"bfloat16 tensor cores (arch table)\""))
        fail_msg("the gemm's roofline is not under its tensor-core ceiling: %s", r);
    free(r);
    free(path);
    r = http_get(kiln_web_port(w), "/api/roofline");
    if (!strstr(r, "\"gflops\":51000,\"gflops_of\":\"fp32 FMA (measured)\""))
        fail_msg("the run's roofline is not under the latest result's ceiling: %s", r);
    free(r);
    kiln_web_stop(w);
    remove_run(run);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_are_strict),
        cmocka_unit_test(test_loopback_hosts),
        cmocka_unit_test(test_non_loopback_only_when_asked),
        cmocka_unit_test(test_serves_and_stops),
        cmocka_unit_test(test_writers_that_come_and_go_are_seen),
        cmocka_unit_test(test_spawned_server),
        cmocka_unit_test(test_roofline_ceiling_is_the_problems),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
