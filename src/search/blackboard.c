/* blackboard.c: the shared-memory blackboard of `kiln optimize`: segment life, the robust lock, and
 * the three shared structures (search trees, dedupe set, gate queue).
 *
 * Why a blackboard, and why it looks like this.
 *
 * `kiln optimize` is several processes: a coordinator, K agents that propose and compile
 * candidates, and one gate per GPU that alone touches the device. They are processes, not threads,
 * because a candidate can take its compiler or its GPU context down with it, and that must cost one
 * process, never the run. They share one thing: the state of the search. Every agent must see the
 * same tree (so that virtual loss steers concurrent selections apart), the same dedupe set (so that
 * two agents never send the same binary to the gate), and the same queue (so that the gate takes
 * candidates in the order they were made). A database round trip per selection would be too slow
 * and a message protocol between K + G processes would be a second program; shared memory is
 * neither.
 *
 * The segment. One POSIX shared-memory object (shm_open + ftruncate + mmap), named after the run
 * directory and the coordinator's pid, mode 0600, unlinked by the coordinator when it exits (and
 * swept at the next start when a kill -9 left it behind). Agents and gates are forked from the
 * coordinator and inherit the mapping; kiln_bb_attach lets an outside process (a test, a debugger)
 * map it by name.
 *
 * The layout is fixed and versioned: a header (magic, layout version, total size, the capacities
 * and the size of every entry type, then the offset of every array), then plain arrays of
 * fixed-size structs. Nothing in the segment is a pointer: links between tree nodes are node
 * indices, so the mapping may sit at any address in any process. Capacities are chosen by the
 * coordinator before the agents start (problems x budget, with room for roots and resumed nodes),
 * and nothing ever grows: a full array is an answer (-1), not a reallocation. A process that maps a
 * segment with another magic, version or entry sizes is refused with a message that says which.
 *
 * The lock. One mutex for the whole blackboard, in the header: PTHREAD_PROCESS_SHARED so that it
 * works across processes, PTHREAD_MUTEX_ROBUST so that a holder's death does not wedge the run.
 * When an agent is killed (by the OOM killer, by its compiler, by a test) while it holds the lock,
 * the next locker gets EOWNERDEAD; it calls pthread_mutex_consistent, counts the recovery, and
 * carries on. One coarse lock is enough: every critical section is a few hundred nanoseconds of
 * pointer-free arithmetic (a UCT descent over at most a few thousand nodes, a hash probe, a ring
 * push), while what the processes spend their time on (compiling, proving, timing) happens outside
 * it.
 *
 * Recovering the mutex only helps if the data under it is still usable, so every writer orders its
 * stores so that a death between any two of them leaves something harmless: a node is fully written
 * and counted before it is linked into its parent's child list (a death in between leaks one
 * unreachable node); a queue slot is filled before the tail moves past it (a death in between
 * leaves an unpublished slot that the next push overwrites); a dedupe entry writes its payload
 * before its key (a death in between leaves an empty slot). What a dead agent held in the tree
 * (virtual loss on a path, a node it was creating) is recorded in its worker slot, and the
 * coordinator releases it when it reaps the process.
 *
 * The stop flag is the one field read without the lock (atomically): agents and gates poll it
 * between pieces of work. */
#include "blackboard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct kiln_bb {
    kiln_bb_header *hdr;
    size_t size;
    char name[128];
};

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

char *kiln_bb_name_for(const char *run_dir, pid_t pid) {
    char real[PATH_MAX];
    const char *path = realpath(run_dir, real) ? real : run_dir;
    uint64_t h = kiln_fnv1a(KILN_FNV_INIT, path, strlen(path));
    return xasprintf("/kiln-%016llx-%d", (unsigned long long)h, (int)pid);
}

int kiln_bb_sweep_stale(void) {
    /* "kiln-<16 hex>-<pid>": any run's, since a segment whose coordinator is dead is garbage
     * whatever its run (and a run directory deleted since would never sweep its own) */
    int removed = 0;
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, "kiln-", 5) != 0 || strlen(n) < 5 + 16 + 2 || n[5 + 16] != '-')
            continue;
        int hex = 1;
        for (int i = 5; i < 5 + 16; i++)
            hex &= (n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f');
        char *end = NULL;
        long pid = strtol(n + 5 + 16 + 1, &end, 10);
        if (!hex || !end || *end || pid <= 0)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno == EPERM)
            continue; /* its coordinator is alive */
        char *name = xasprintf("/%s", n);
        if (shm_unlink(name) == 0)
            removed++;
        free(name);
    }
    closedir(d);
    return removed;
}

static void layout(const kiln_bb_caps *caps, kiln_bb_header *h) {
    size_t off = align64(sizeof(kiln_bb_header));
    h->header_bytes = (uint32_t)sizeof(kiln_bb_header);
    h->off_problems = off;
    off = align64(off + (size_t)caps->max_problems * sizeof(kiln_bb_problem));
    h->off_nodes = off;
    off = align64(off + (size_t)caps->max_nodes * sizeof(kiln_bb_node));
    h->off_dedupe = off;
    off = align64(off + (size_t)caps->dedupe_slots * sizeof(kiln_bb_dedupe));
    h->off_queue = off;
    off = align64(off + (size_t)caps->queue_slots * sizeof(kiln_bb_slot));
    h->off_workers = off;
    off = align64(off + (size_t)caps->max_workers * sizeof(kiln_bb_worker));
    h->total_bytes = off;
    h->problem_bytes = (uint32_t)sizeof(kiln_bb_problem);
    h->node_bytes = (uint32_t)sizeof(kiln_bb_node);
    h->dedupe_bytes = (uint32_t)sizeof(kiln_bb_dedupe);
    h->slot_bytes = (uint32_t)sizeof(kiln_bb_slot);
    h->worker_bytes = (uint32_t)sizeof(kiln_bb_worker);
    h->caps = *caps;
}

int kiln_bb_create(const char *name, const kiln_bb_caps *caps_in, kiln_bb **out, kiln_err *err) {
    *out = NULL;
    kiln_bb_caps caps = *caps_in;
    if (caps.max_problems < 1 || caps.max_nodes < 1 || caps.queue_slots < 1 || caps.max_workers < 1)
        return kiln_errf(err, KILN_ERR_INVALID, "blackboard capacities must be positive");
    /* the dedupe set is open addressing: a power of two at least twice the nodes keeps probes short
     */
    int32_t d = 16;
    while (d < caps.dedupe_slots || d < 2 * caps.max_nodes)
        d *= 2;
    caps.dedupe_slots = d;
    kiln_bb_header probe;
    memset(&probe, 0, sizeof probe);
    layout(&caps, &probe);

    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return kiln_errf(err, KILN_ERR_IO, "blackboard %s: shm_open: %s", name, strerror(errno));
    if (ftruncate(fd, (off_t)probe.total_bytes) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return kiln_errf(err, KILN_ERR_IO, "blackboard %s: ftruncate to %llu bytes: %s", name,
                         (unsigned long long)probe.total_bytes, strerror(e));
    }
    void *mem = mmap(NULL, probe.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mem == MAP_FAILED) {
        int e = errno;
        shm_unlink(name);
        return kiln_errf(err, KILN_ERR_IO, "blackboard %s: mmap: %s", name, strerror(e));
    }
    memset(mem, 0, probe.total_bytes);
    kiln_bb_header *h = mem;
    *h = probe;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(&h->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) {
        munmap(mem, probe.total_bytes);
        shm_unlink(name);
        return kiln_errf(err, KILN_ERR_IO, "blackboard %s: pthread_mutex_init: %s", name,
                         strerror(rc));
    }
    kiln_bb *bb = xcalloc(1, sizeof *bb);
    bb->hdr = h;
    bb->size = probe.total_bytes;
    snprintf(bb->name, sizeof bb->name, "%s", name);
    for (int i = 0; i < caps.max_workers; i++) {
        kiln_bb_worker *w = kiln_bb_worker_at(bb, i);
        w->held_node = -1;
        w->slot = -1;
    }
    /* the magic goes last: a process attaching mid-creation sees no magic, not half a header */
    __atomic_store_n(&h->magic, KILN_BB_MAGIC, __ATOMIC_RELEASE);
    h->layout_version = KILN_BB_LAYOUT_VERSION;
    *out = bb;
    return KILN_OK;
}

int kiln_bb_attach(const char *name, kiln_bb **out, kiln_err *err) {
    *out = NULL;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return kiln_errf(err, KILN_ERR_IO, "blackboard %s: %s", name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(kiln_bb_header)) {
        close(fd);
        return kiln_errf(err, KILN_ERR_FORMAT, "blackboard %s: too small to be a kiln blackboard",
                         name);
    }
    void *mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mem == MAP_FAILED)
        return kiln_errf(err, KILN_ERR_IO, "blackboard %s: mmap: %s", name, strerror(errno));
    kiln_bb_header *h = mem;
    int rc = KILN_OK;
    kiln_bb_header want;
    memset(&want, 0, sizeof want);
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != KILN_BB_MAGIC)
        rc = kiln_errf(err, KILN_ERR_FORMAT, "blackboard %s: not a kiln blackboard (bad magic)",
                       name);
    else if (h->layout_version != KILN_BB_LAYOUT_VERSION)
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "blackboard %s: layout version %u, this kiln reads version %d", name,
                       h->layout_version, KILN_BB_LAYOUT_VERSION);
    else {
        layout(&h->caps, &want);
        if (h->header_bytes != want.header_bytes || h->problem_bytes != want.problem_bytes ||
            h->node_bytes != want.node_bytes || h->dedupe_bytes != want.dedupe_bytes ||
            h->slot_bytes != want.slot_bytes || h->worker_bytes != want.worker_bytes)
            rc = kiln_errf(err, KILN_ERR_FORMAT,
                           "blackboard %s: entry sizes differ from this build's (another kiln "
                           "wrote it)",
                           name);
        else if (h->total_bytes != want.total_bytes || (size_t)st.st_size < want.total_bytes)
            rc =
                kiln_errf(err, KILN_ERR_FORMAT,
                          "blackboard %s: %llu bytes for its capacities, header says %llu", name,
                          (unsigned long long)want.total_bytes, (unsigned long long)h->total_bytes);
    }
    if (rc != KILN_OK) {
        munmap(mem, (size_t)st.st_size);
        return rc;
    }
    kiln_bb *bb = xcalloc(1, sizeof *bb);
    bb->hdr = h;
    bb->size = (size_t)st.st_size;
    snprintf(bb->name, sizeof bb->name, "%s", name);
    *out = bb;
    return KILN_OK;
}

void kiln_bb_detach(kiln_bb *bb) {
    if (!bb)
        return;
    munmap(bb->hdr, bb->size);
    free(bb);
}

int kiln_bb_unlink(const char *name) {
    return shm_unlink(name);
}

const char *kiln_bb_name(const kiln_bb *bb) {
    return bb->name;
}

int kiln_bb_lock(kiln_bb *bb) {
    int rc;
    while ((rc = pthread_mutex_lock(&bb->hdr->lock)) == EINTR) {
    }
    if (rc == EOWNERDEAD) {
        /* The previous holder died inside a critical section. Every writer orders its stores so
         * that any prefix of an update is harmless (see the essay), so the data is usable as it
         * is: make the mutex consistent and count the event. */
        pthread_mutex_consistent(&bb->hdr->lock);
        bb->hdr->lock_recoveries++;
        return 1;
    }
    KILN_ASSERT(rc == 0);
    return 0;
}

void kiln_bb_unlock(kiln_bb *bb) {
    pthread_mutex_unlock(&bb->hdr->lock);
}

kiln_bb_header *kiln_bb_hdr(kiln_bb *bb) {
    return bb->hdr;
}

kiln_bb_problem *kiln_bb_problem_at(kiln_bb *bb, int i) {
    KILN_ASSERT(i >= 0 && i < bb->hdr->caps.max_problems);
    return (kiln_bb_problem *)((char *)bb->hdr + bb->hdr->off_problems) + i;
}

kiln_bb_node *kiln_bb_node_at(kiln_bb *bb, int i) {
    KILN_ASSERT(i >= 0 && i < bb->hdr->caps.max_nodes);
    return (kiln_bb_node *)((char *)bb->hdr + bb->hdr->off_nodes) + i;
}

kiln_bb_worker *kiln_bb_worker_at(kiln_bb *bb, int i) {
    KILN_ASSERT(i >= 0 && i < bb->hdr->caps.max_workers);
    return (kiln_bb_worker *)((char *)bb->hdr + bb->hdr->off_workers) + i;
}

int kiln_bb_selection_held(kiln_bb *bb, int pi, int except) {
    for (int w = 0; w < bb->hdr->n_workers; w++) {
        int held = kiln_bb_worker_at(bb, w)->held_node;
        if (w != except && held >= 0 && kiln_bb_node_at(bb, held)->problem == pi)
            return 1;
    }
    return 0;
}

kiln_bb_slot *kiln_bb_slot_at(kiln_bb *bb, int i) {
    KILN_ASSERT(i >= 0 && i < bb->hdr->caps.queue_slots);
    return (kiln_bb_slot *)((char *)bb->hdr + bb->hdr->off_queue) + i;
}

static kiln_bb_dedupe *dedupe_at(kiln_bb *bb, int i) {
    return (kiln_bb_dedupe *)((char *)bb->hdr + bb->hdr->off_dedupe) + i;
}

int kiln_bb_problem_add(kiln_bb *bb, int64_t store_id, const char *name) {
    kiln_bb_header *h = bb->hdr;
    if (h->n_problems >= h->caps.max_problems)
        return -1;
    int i = h->n_problems;
    kiln_bb_problem *p = kiln_bb_problem_at(bb, i);
    memset(p, 0, sizeof *p);
    p->store_id = store_id;
    snprintf(p->name, sizeof p->name, "%s", name ? name : "");
    p->root = -1;
    p->incumbent_node = -1;
    p->best_time_us = -1;
    p->best_score = -1;
    p->best_sol_pct = -1;
    p->best_seen_time_us = -1;
    p->draft_root = -1;
    for (int k = 0; k <= KILN_BB_MAX_DRAFTS; k++)
        p->draft_root_of[k] = -1;
    h->n_problems = i + 1;
    return i;
}

int kiln_bb_node_add(kiln_bb *bb, int problem, int parent, int status) {
    kiln_bb_header *h = bb->hdr;
    if (h->n_nodes >= h->caps.max_nodes)
        return -1;
    int i = h->n_nodes;
    kiln_bb_node *n = kiln_bb_node_at(bb, i);
    memset(n, 0, sizeof *n);
    n->problem = problem;
    n->parent = parent;
    n->first_child = -1;
    n->next_sibling = -1;
    n->family = -1;
    n->status = status;
    n->agent = -1;
    n->owner = -1;
    n->time_us = -1;
    n->reward = 0;
    n->best = 0;
    /* counted before it is linked: a death between the two leaks one unreachable node */
    h->n_nodes = i + 1;
    if (parent >= 0) {
        kiln_bb_node *pa = kiln_bb_node_at(bb, parent);
        n->next_sibling = pa->first_child;
        n->draft = pa->draft;
        pa->first_child = i;
        pa->n_children++;
    }
    return i;
}

void kiln_bb_node_kill(kiln_bb *bb, int node) {
    kiln_bb_node *n = kiln_bb_node_at(bb, node);
    if (n->status == KILN_BB_NODE_DEAD)
        return;
    n->status = KILN_BB_NODE_DEAD;
    n->owner = -1;
    if (n->parent >= 0) {
        kiln_bb_node *pa = kiln_bb_node_at(bb, n->parent);
        if (pa->n_children > 0)
            pa->n_children--;
    }
}

static uint64_t dedupe_key(int problem, uint64_t hash) {
    uint64_t k = hash ^ ((uint64_t)(uint32_t)problem * 0x9e3779b97f4a7c15ULL);
    /* finaliser of splitmix64: spreads the bits before masking */
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    k ^= k >> 31;
    return k;
}

kiln_bb_dedupe *kiln_bb_dedupe_find(kiln_bb *bb, int problem, uint64_t hash) {
    if (hash == 0)
        hash = 1;
    uint32_t mask = (uint32_t)bb->hdr->caps.dedupe_slots - 1;
    uint32_t i = (uint32_t)dedupe_key(problem, hash) & mask;
    for (uint32_t probes = 0; probes <= mask; probes++, i = (i + 1) & mask) {
        kiln_bb_dedupe *e = dedupe_at(bb, (int)i);
        if (e->hash == 0)
            return NULL;
        if (e->hash == hash && e->problem == problem)
            return e;
    }
    return NULL;
}

int kiln_bb_dedupe_insert(kiln_bb *bb, int problem, uint64_t hash, int node, int64_t candidate_id,
                          kiln_bb_dedupe *found) {
    if (hash == 0)
        hash = 1;
    kiln_bb_header *h = bb->hdr;
    uint32_t mask = (uint32_t)h->caps.dedupe_slots - 1;
    /* keep the load under 3/4 so that probes stay short and a miss always finds an empty slot */
    uint32_t i = (uint32_t)dedupe_key(problem, hash) & mask;
    for (uint32_t probes = 0; probes <= mask; probes++, i = (i + 1) & mask) {
        kiln_bb_dedupe *e = dedupe_at(bb, (int)i);
        if (e->hash == 0) {
            if ((uint64_t)(h->n_dedupe + 1) * 4 > (uint64_t)h->caps.dedupe_slots * 3)
                return -1;
            /* payload first, key last: a death in between leaves the slot empty */
            e->problem = problem;
            e->node = node;
            e->candidate_id = candidate_id;
            e->hash = hash;
            h->n_dedupe++;
            return 1;
        }
        if (e->hash == hash && e->problem == problem) {
            if (found)
                *found = *e;
            return 0;
        }
    }
    return -1;
}

int kiln_bb_queue_push(kiln_bb *bb, int problem, int node, int64_t candidate_id) {
    kiln_bb_header *h = bb->hdr;
    int n = h->caps.queue_slots;
    int i = (int)(h->queue_tail % (uint64_t)n);
    kiln_bb_slot *s = kiln_bb_slot_at(bb, i);
    if (s->state == KILN_BB_SLOT_QUEUED || s->state == KILN_BB_SLOT_TAKEN)
        return -1;
    s->seq = h->queue_tail;
    s->problem = problem;
    s->node = node;
    s->candidate_id = candidate_id;
    s->gate = -1;
    s->outcome = -1;
    s->reward = 0;
    s->state = KILN_BB_SLOT_QUEUED;
    /* published last: a push that dies before this line is overwritten by the next one */
    h->queue_tail++;
    return i;
}

int kiln_bb_queue_take(kiln_bb *bb, int gate) {
    kiln_bb_header *h = bb->hdr;
    int n = h->caps.queue_slots;
    while (h->queue_head < h->queue_tail) {
        int i = (int)(h->queue_head % (uint64_t)n);
        kiln_bb_slot *s = kiln_bb_slot_at(bb, i);
        h->queue_head++;
        if (s->state != KILN_BB_SLOT_QUEUED)
            continue; /* withdrawn (the coordinator answered it) */
        s->state = KILN_BB_SLOT_TAKEN;
        s->gate = gate;
        return i;
    }
    return -1;
}

void kiln_bb_queue_done(kiln_bb *bb, int slot, int outcome, double reward) {
    kiln_bb_slot *s = kiln_bb_slot_at(bb, slot);
    s->outcome = outcome;
    s->reward = reward;
    s->state = KILN_BB_SLOT_DONE;
}

int kiln_bb_queue_busy(kiln_bb *bb) {
    int busy = 0;
    for (int i = 0; i < bb->hdr->caps.queue_slots; i++) {
        int st = kiln_bb_slot_at(bb, i)->state;
        busy += st == KILN_BB_SLOT_QUEUED || st == KILN_BB_SLOT_TAKEN;
    }
    return busy;
}

int kiln_bb_worker_add(kiln_bb *bb, int role, int kind) {
    kiln_bb_header *h = bb->hdr;
    for (int i = 0; i < h->caps.max_workers; i++) {
        kiln_bb_worker *w = kiln_bb_worker_at(bb, i);
        if (w->role == KILN_BB_ROLE_NONE) {
            memset(w, 0, sizeof *w);
            w->kind = kind;
            w->held_node = -1;
            w->slot = -1;
            w->role = role;
            if (i >= h->n_workers)
                h->n_workers = i + 1;
            return i;
        }
    }
    return -1;
}

int kiln_bb_stopping(kiln_bb *bb) {
    return __atomic_load_n(&bb->hdr->stop, __ATOMIC_ACQUIRE);
}

void kiln_bb_set_stop(kiln_bb *bb) {
    __atomic_store_n(&bb->hdr->stop, 1, __ATOMIC_RELEASE);
}

void kiln_bb_touch(kiln_bb *bb, int problem) {
    bb->hdr->generation++;
    if (problem >= 0 && problem < bb->hdr->n_problems)
        kiln_bb_problem_at(bb, problem)->generation++;
}
