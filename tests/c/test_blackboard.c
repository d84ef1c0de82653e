/* test_blackboard.c: the shared-memory blackboard under real processes: its layout check, exact
 * totals under contention, a holder killed with the lock held, the dedupe set and the gate queue.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "search/blackboard.h"

static int name_counter;

/* A segment of its own for each test; removed at the end of the test. */
static kiln_bb *make_bb(char *name, size_t n, int max_nodes, int queue_slots) {
    snprintf(name, n, "/kiln-test-%d-%d", (int)getpid(), name_counter++);
    shm_unlink(name);
    kiln_bb_caps caps = {.max_problems = 4,
                         .max_nodes = max_nodes,
                         .dedupe_slots = 0,
                         .queue_slots = queue_slots,
                         .max_workers = 8};
    kiln_bb *bb = NULL;
    kiln_err err;
    int rc = kiln_bb_create(name, &caps, &bb, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, KILN_OK);
    return bb;
}

static void drop_bb(kiln_bb *bb, const char *name) {
    kiln_bb_detach(bb);
    assert_int_equal(kiln_bb_unlink(name), 0);
}

/* Waits for every child and asserts each exited 0. */
static void wait_all(pid_t *pids, int n) {
    for (int i = 0; i < n; i++) {
        int st = 0;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
}

static void test_layout_version(void **state) {
    (void)state;
    char name[64];
    kiln_bb *bb = make_bb(name, sizeof name, 64, 8);
    kiln_bb_header *h = kiln_bb_hdr(bb);
    assert_true(h->magic == KILN_BB_MAGIC);
    assert_int_equal(h->layout_version, KILN_BB_LAYOUT_VERSION);
    assert_true(h->total_bytes >= sizeof *h);
    /* the dedupe set is a power of two, at least twice the nodes */
    assert_int_equal(h->caps.dedupe_slots & (h->caps.dedupe_slots - 1), 0);
    assert_true(h->caps.dedupe_slots >= 128);

    kiln_bb *other = NULL;
    kiln_err err;
    assert_int_equal(kiln_bb_attach(name, &other, &err), KILN_OK);
    kiln_bb_lock(other);
    int p = kiln_bb_problem_add(other, 7, "softmax");
    kiln_bb_unlock(other);
    assert_int_equal(p, 0);
    /* the same memory, seen through the other mapping */
    assert_int_equal(kiln_bb_problem_at(bb, 0)->store_id, 7);
    assert_string_equal(kiln_bb_problem_at(bb, 0)->name, "softmax");
    kiln_bb_detach(other);

    h->layout_version = KILN_BB_LAYOUT_VERSION + 1;
    assert_int_equal(kiln_bb_attach(name, &other, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "layout version"));
    h->layout_version = KILN_BB_LAYOUT_VERSION;

    h->node_bytes += 8;
    assert_int_equal(kiln_bb_attach(name, &other, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "entry sizes"));
    h->node_bytes -= 8;

    h->magic ^= 1;
    assert_int_equal(kiln_bb_attach(name, &other, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "magic"));
    h->magic ^= 1;

    assert_int_equal(kiln_bb_attach(name, &other, &err), KILN_OK);
    kiln_bb_detach(other);
    assert_int_equal(kiln_bb_attach("/kiln-test-no-such-segment", &other, &err), KILN_ERR_IO);
    /* names are unique per run directory and coordinator */
    char *a = kiln_bb_name_for("/tmp", 1), *b = kiln_bb_name_for("/tmp", 2),
         *c = kiln_bb_name_for("/", 1);
    assert_string_not_equal(a, b);
    assert_string_not_equal(a, c);
    assert_int_equal(strncmp(a, "/kiln-", 6), 0);
    free(a);
    free(b);
    free(c);
    drop_bb(bb, name);
}

enum { N_PROCS = 4, N_INCREMENTS = 5000 };

/* Each child attaches by name (as an outside process would) and does locked work. */
static void hammer(const char *name, int id) {
    kiln_bb *bb = NULL;
    if (kiln_bb_attach(name, &bb, NULL))
        _exit(10);
    for (int i = 0; i < N_INCREMENTS; i++) {
        kiln_bb_lock(bb);
        kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
        P->done++; /* not atomic: only the lock keeps the total exact */
        kiln_bb_worker_at(bb, id)->work_done++;
        if (i % 10 == 0) {
            if (kiln_bb_node_add(bb, 0, P->root, KILN_BB_NODE_QUEUED) < 0)
                _exit(11);
        }
        kiln_bb_unlock(bb);
    }
    kiln_bb_detach(bb);
    _exit(0);
}

static void test_contended_totals(void **state) {
    (void)state;
    char name[64];
    kiln_bb *bb = make_bb(name, sizeof name, 4096, 8);
    kiln_bb_lock(bb);
    int p = kiln_bb_problem_add(bb, 1, "p");
    kiln_bb_problem_at(bb, p)->root = kiln_bb_node_add(bb, p, -1, KILN_BB_NODE_ROOT);
    kiln_bb_unlock(bb);
    pid_t pids[N_PROCS];
    for (int i = 0; i < N_PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            hammer(name, i);
    }
    wait_all(pids, N_PROCS);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    assert_int_equal(P->done, N_PROCS * N_INCREMENTS);
    for (int i = 0; i < N_PROCS; i++)
        assert_int_equal(kiln_bb_worker_at(bb, i)->work_done, N_INCREMENTS);
    int expect_children = N_PROCS * (N_INCREMENTS / 10);
    assert_int_equal(kiln_bb_hdr(bb)->n_nodes, 1 + expect_children);
    kiln_bb_node *root = kiln_bb_node_at(bb, P->root);
    assert_int_equal(root->n_children, expect_children);
    /* the child list is intact: every node once, no cycle */
    int walked = 0;
    char *seen = calloc((size_t)kiln_bb_hdr(bb)->n_nodes, 1);
    for (int ch = root->first_child; ch >= 0; ch = kiln_bb_node_at(bb, ch)->next_sibling) {
        assert_true(ch > 0 && ch < kiln_bb_hdr(bb)->n_nodes);
        assert_false(seen[ch]);
        seen[ch] = 1;
        assert_int_equal(kiln_bb_node_at(bb, ch)->parent, P->root);
        walked++;
    }
    free(seen);
    assert_int_equal(walked, expect_children);
    assert_int_equal(kiln_bb_hdr(bb)->lock_recoveries, 0);
    drop_bb(bb, name);
}

static void test_holder_killed(void **state) {
    (void)state;
    char name[64];
    kiln_bb *bb = make_bb(name, sizeof name, 64, 8);
    kiln_bb_lock(bb);
    kiln_bb_problem_add(bb, 1, "p");
    kiln_bb_unlock(bb);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        kiln_bb_lock(bb);
        kiln_bb_problem_at(bb, 0)->done = 42;
        char c = 'L';
        if (write(fds[1], &c, 1) != 1)
            _exit(3);
        for (;;)
            pause(); /* dies holding the lock */
    }
    close(fds[1]);
    char c = 0;
    assert_int_equal(read(fds[0], &c, 1), 1);
    assert_int_equal(c, 'L');
    close(fds[0]);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));

    /* the next locker recovers; what the dead holder wrote is there */
    assert_int_equal(kiln_bb_lock(bb), 1);
    assert_int_equal(kiln_bb_problem_at(bb, 0)->done, 42);
    assert_int_equal(kiln_bb_hdr(bb)->lock_recoveries, 1);
    kiln_bb_unlock(bb);
    assert_int_equal(kiln_bb_lock(bb), 0);
    kiln_bb_unlock(bb);

    /* and the mutex works for everyone afterwards: contention again, exact totals */
    pid_t pids[N_PROCS];
    for (int i = 0; i < N_PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            for (int k = 0; k < 1000; k++) {
                kiln_bb_lock(bb);
                kiln_bb_problem_at(bb, 0)->done++;
                kiln_bb_unlock(bb);
            }
            _exit(0);
        }
    }
    wait_all(pids, N_PROCS);
    assert_int_equal(kiln_bb_problem_at(bb, 0)->done, 42 + N_PROCS * 1000);
    assert_int_equal(kiln_bb_hdr(bb)->lock_recoveries, 1);
    drop_bb(bb, name);
}

enum { N_KEYS = 2000 };

static void test_dedupe_contention(void **state) {
    (void)state;
    char name[64];
    kiln_bb *bb = make_bb(name, sizeof name, 4 * N_KEYS, 8);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pids[N_PROCS];
    for (int i = 0; i < N_PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(fds[0]);
            /* two processes per problem race on the very same keys, in opposite orders */
            int problem = i % 2, inserted = 0;
            for (int k = 0; k < N_KEYS; k++) {
                int key = i < 2 ? k : N_KEYS - 1 - k;
                uint64_t hash = 0x1000003ULL * (uint64_t)(key + 1);
                kiln_bb_lock(bb);
                int rc = kiln_bb_dedupe_insert(bb, problem, hash, i, 1000 * i + k, NULL);
                kiln_bb_unlock(bb);
                if (rc < 0)
                    _exit(4);
                inserted += rc;
            }
            if (write(fds[1], &inserted, sizeof inserted) != sizeof inserted)
                _exit(5);
            _exit(0);
        }
    }
    close(fds[1]);
    int total = 0, got;
    for (int i = 0; i < N_PROCS; i++) {
        assert_int_equal(read(fds[0], &got, sizeof got), sizeof got);
        total += got;
    }
    close(fds[0]);
    wait_all(pids, N_PROCS);
    /* every (problem, key) was inserted exactly once, by whichever process came first */
    assert_int_equal(total, 2 * N_KEYS);
    assert_int_equal(kiln_bb_hdr(bb)->n_dedupe, 2 * N_KEYS);
    for (int problem = 0; problem < 2; problem++)
        for (int k = 0; k < N_KEYS; k++) {
            kiln_bb_dedupe *e = kiln_bb_dedupe_find(bb, problem, 0x1000003ULL * (uint64_t)(k + 1));
            assert_non_null(e);
            assert_int_equal(e->problem, problem);
            assert_int_equal(e->node % 2, problem);
            kiln_bb_dedupe dup;
            assert_int_equal(
                kiln_bb_dedupe_insert(bb, problem, 0x1000003ULL * (uint64_t)(k + 1), 9, 9, &dup),
                0);
            assert_true(dup.candidate_id == e->candidate_id);
        }
    assert_null(kiln_bb_dedupe_find(bb, 3, 0x1000003ULL));
    /* hash 0 is a key like any other */
    assert_int_equal(kiln_bb_dedupe_insert(bb, 3, 0, 1, 1, NULL), 1);
    assert_non_null(kiln_bb_dedupe_find(bb, 3, 0));
    drop_bb(bb, name);

    /* a full set answers -1 instead of growing */
    bb = make_bb(name, sizeof name, 4, 8);
    int slots = kiln_bb_hdr(bb)->caps.dedupe_slots, inserted = 0, full = 0;
    for (int k = 0; k < slots; k++) {
        int rc = kiln_bb_dedupe_insert(bb, 0, (uint64_t)k + 7, 0, k, NULL);
        if (rc == 1)
            inserted++;
        else if (rc == -1)
            full = 1;
    }
    assert_true(full);
    assert_true(inserted >= slots / 2 && inserted < slots);
    drop_bb(bb, name);
}

enum { N_PRODUCERS = 2, N_CONSUMERS = 2, N_ITEMS = 1500 };

static void test_queue_fifo(void **state) {
    (void)state;
    char name[64];
    /* a small ring, so that producers find it full and wait */
    kiln_bb *bb = make_bb(name, sizeof name, 64, 16);
    kiln_bb_lock(bb);
    kiln_bb_problem_add(bb, 1, "taken");
    kiln_bb_unlock(bb);
    char logs[N_CONSUMERS][128];
    pid_t pids[N_PRODUCERS + N_CONSUMERS];
    for (int i = 0; i < N_PRODUCERS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            for (int k = 0; k < N_ITEMS;) {
                kiln_bb_lock(bb);
                int slot = kiln_bb_queue_push(bb, i, k, (int64_t)i * 1000000 + k);
                kiln_bb_unlock(bb);
                if (slot >= 0)
                    k++;
                else
                    usleep(50);
            }
            _exit(0);
        }
    }
    for (int j = 0; j < N_CONSUMERS; j++) {
        snprintf(logs[j], sizeof logs[j], "/tmp/kiln-test-queue-%d-%d.log", (int)getpid(), j);
        pids[N_PRODUCERS + j] = fork();
        assert_true(pids[N_PRODUCERS + j] >= 0);
        if (pids[N_PRODUCERS + j] == 0) {
            FILE *f = fopen(logs[j], "w");
            if (!f)
                _exit(6);
            for (;;) {
                kiln_bb_lock(bb);
                kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
                if (P->done >= N_PRODUCERS * N_ITEMS) {
                    kiln_bb_unlock(bb);
                    break;
                }
                int slot = kiln_bb_queue_take(bb, j);
                kiln_bb_slot s;
                if (slot >= 0) {
                    s = *kiln_bb_slot_at(bb, slot);
                    P->done++;
                }
                kiln_bb_unlock(bb);
                if (slot < 0) {
                    usleep(50);
                    continue;
                }
                if (s.gate != j || s.state != KILN_BB_SLOT_TAKEN)
                    _exit(7);
                fprintf(f, "%llu %lld\n", (unsigned long long)s.seq, (long long)s.candidate_id);
                kiln_bb_lock(bb);
                kiln_bb_queue_done(bb, slot, 0, 0.5);
                kiln_bb_unlock(bb);
            }
            fclose(f);
            _exit(0);
        }
    }
    wait_all(pids, N_PRODUCERS + N_CONSUMERS);
    int total = N_PRODUCERS * N_ITEMS;
    int64_t *by_seq = malloc((size_t)total * sizeof *by_seq);
    for (int k = 0; k < total; k++)
        by_seq[k] = -1;
    int counted = 0;
    for (int j = 0; j < N_CONSUMERS; j++) {
        FILE *f = fopen(logs[j], "r");
        assert_non_null(f);
        unsigned long long seq, prev = 0;
        long long cand;
        int first = 1;
        while (fscanf(f, "%llu %lld", &seq, &cand) == 2) {
            assert_true(seq < (unsigned long long)total);
            /* each consumer takes in queue order */
            assert_true(first || seq > prev);
            first = 0;
            prev = seq;
            assert_int_equal(by_seq[seq], -1);
            by_seq[seq] = cand;
            counted++;
        }
        fclose(f);
        unlink(logs[j]);
    }
    assert_int_equal(counted, total);
    /* in seq order, each producer's items come out in the order it pushed them: FIFO */
    int64_t next[N_PRODUCERS] = {0};
    for (int k = 0; k < total; k++) {
        assert_true(by_seq[k] >= 0);
        int producer = (int)(by_seq[k] / 1000000);
        assert_true(producer >= 0 && producer < N_PRODUCERS);
        assert_int_equal(by_seq[k] % 1000000, next[producer]);
        next[producer]++;
    }
    for (int i = 0; i < N_PRODUCERS; i++)
        assert_int_equal(next[i], N_ITEMS);
    free(by_seq);
    assert_int_equal(kiln_bb_queue_busy(bb), 0);
    drop_bb(bb, name);
}

static void test_queue_full_and_reuse(void **state) {
    (void)state;
    char name[64];
    kiln_bb *bb = make_bb(name, sizeof name, 64, 4);
    for (int k = 0; k < 4; k++)
        assert_true(kiln_bb_queue_push(bb, 0, k, 100 + k) >= 0);
    assert_int_equal(kiln_bb_queue_push(bb, 0, 9, 999), -1);
    int s0 = kiln_bb_queue_take(bb, 1);
    assert_int_equal(kiln_bb_slot_at(bb, s0)->candidate_id, 100);
    /* taken but not answered: its slot is still not free */
    assert_int_equal(kiln_bb_queue_push(bb, 0, 9, 999), -1);
    kiln_bb_queue_done(bb, s0, 0, 1.0);
    assert_int_equal(kiln_bb_queue_busy(bb), 3);
    assert_true(kiln_bb_queue_push(bb, 0, 4, 104) >= 0);
    for (int k = 1; k <= 4; k++) {
        int s = kiln_bb_queue_take(bb, 1);
        assert_true(s >= 0);
        assert_int_equal(kiln_bb_slot_at(bb, s)->candidate_id, 100 + k);
        kiln_bb_queue_done(bb, s, 0, 0);
    }
    assert_int_equal(kiln_bb_queue_take(bb, 1), -1);
    drop_bb(bb, name);
}

static void test_sweep_stale(void **state) {
    (void)state;
    char dir[] = "/tmp/kiln-test-bb-XXXXXX";
    assert_non_null(mkdtemp(dir));
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    char *stale = kiln_bb_name_for(dir, dead);
    char *live = kiln_bb_name_for(dir, getpid());
    kiln_bb_caps caps = {1, 4, 0, 2, 1};
    kiln_bb *a = NULL, *b = NULL;
    assert_int_equal(kiln_bb_create(stale, &caps, &a, NULL), KILN_OK);
    assert_int_equal(kiln_bb_create(live, &caps, &b, NULL), KILN_OK);
    kiln_bb_detach(a);
    /* the dead coordinator's segment goes, the live one's stays */
    assert_true(kiln_bb_sweep_stale() >= 1);
    kiln_bb *again = NULL;
    assert_int_equal(kiln_bb_attach(stale, &again, NULL), KILN_ERR_IO);
    assert_int_equal(kiln_bb_attach(live, &again, NULL), KILN_OK);
    kiln_bb_detach(again);
    /* creating over an existing name is refused (O_EXCL) */
    kiln_bb *dup = NULL;
    assert_int_equal(kiln_bb_create(live, &caps, &dup, NULL), KILN_ERR_IO);
    kiln_bb_detach(b);
    assert_int_equal(kiln_bb_unlink(live), 0);
    free(stale);
    free(live);
    rmdir(dir);
}

/* A failed assertion skips a test's own cleanup: remove every segment the tests named. */
static int unlink_all(void **state) {
    (void)state;
    char name[64];
    for (int i = 0; i < name_counter; i++) {
        snprintf(name, sizeof name, "/kiln-test-%d-%d", (int)getpid(), i);
        shm_unlink(name);
    }
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_version), cmocka_unit_test(test_contended_totals),
        cmocka_unit_test(test_holder_killed),  cmocka_unit_test(test_dedupe_contention),
        cmocka_unit_test(test_queue_fifo),     cmocka_unit_test(test_queue_full_and_reuse),
        cmocka_unit_test(test_sweep_stale),
    };
    return cmocka_run_group_tests_name("blackboard", tests, NULL, unlink_all);
}
