/* blackboard.h: the shared memory of one `kiln optimize` run: a fixed, versioned, pointer-free
 * layout in one POSIX shared-memory segment that the coordinator, the agents and the gates all map,
 * guarded by one process-shared robust mutex (the essay at the top of blackboard.c says why it
 * looks so). */
#ifndef KILN_BLACKBOARD_H
#define KILN_BLACKBOARD_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/common.h"

#define KILN_BB_MAGIC 0x313062626e6c696bULL /* "kilnbb01" little-endian */
#define KILN_BB_LAYOUT_VERSION 2
#define KILN_BB_MAX_PARAMS 12 /* = KILN_FAMILY_MAX_PARAMS */
#define KILN_BB_MAX_FAMILIES 8
#define KILN_BB_NAME_LEN 96

/* Node status: the life of one point of a search tree. */
enum {
    KILN_BB_NODE_ROOT = 1, /* the root of a problem's tree: no params, never evaluated */
    KILN_BB_NODE_CREATING, /* an agent reserved it and is writing its candidate */
    KILN_BB_NODE_QUEUED,   /* its candidate waits for (or is in) a gate */
    KILN_BB_NODE_DONE,     /* evaluated, ok */
    KILN_BB_NODE_FAILED,   /* evaluated, any failure outcome (reward 0) */
    KILN_BB_NODE_DEAD      /* abandoned (its agent died before queueing it): ignored by search */
};

/* Node flags. */
enum {
    KILN_BB_FLAG_SATURATED = 1, /* no new child can be made below it: selection skips it */
    KILN_BB_FLAG_DIRTY = 2,     /* visits/value changed since the coordinator last saved it */
    KILN_BB_FLAG_FOREIGN = 4,   /* of a family not linked into this kiln: its store row is never
                                   rewritten (it would lose the family's name) */
};

/* Draft state of a problem (kiln_bb_problem.draft_state). */
enum { KILN_BB_DRAFT_NONE = 0, KILN_BB_DRAFT_ACTIVE = 1 };

/* Per-draft outcome (kiln_bb_problem.draft_fate[k], k = draft number, 1-based). */
enum { KILN_BB_FATE_OPEN = 0, KILN_BB_FATE_CLOSED = 1, KILN_BB_FATE_PROMOTED = 2 };
#define KILN_BB_MAX_DRAFTS 32

/* One problem being optimised. Counters count distinct candidates (duplicates never reach them). */
typedef struct {
    int64_t store_id;
    char name[KILN_BB_NAME_LEN];
    int32_t root; /* node index of the tree's root */
    int32_t n_families;
    int32_t family[KILN_BB_MAX_FAMILIES]; /* registry indices (kiln_family_at) that match it */

    int32_t incumbent_node;   /* -1 until a candidate proved ok */
    uint32_t opened_families; /* bit k: family slot k was opened at the root because the search
                                 would otherwise have ended without trying it (mcts.c) */
    int64_t incumbent_candidate;
    double best_time_us;      /* the incumbent's time (its re-timed median once challenged) */
    double best_score;        /* SOL score of the incumbent; < 0 unknown */
    double best_sol_pct;      /* SOL % of the incumbent; < 0 unknown */
    double best_seen_time_us; /* fastest ok time of any candidate: the reward scale when S is
                                 unknown */
    int32_t since_improve;    /* results since the incumbent last improved by >= 1% */

    int32_t draft_state; /* KILN_BB_DRAFT_* */
    int32_t draft_count; /* drafts opened so far; the active one is number draft_count */
    int32_t draft_root;  /* node index of the active draft's root, -1 until made */
    int32_t draft_slice; /* candidates the active draft may make */
    int32_t draft_made;  /* candidates it made */
    int32_t draft_pending;
    uint8_t draft_fate[KILN_BB_MAX_DRAFTS + 1];
    int32_t draft_root_of[KILN_BB_MAX_DRAFTS + 1]; /* node index of each draft's root, -1 */

    int32_t budget;    /* candidates allowed in all (across resumed runs) */
    int32_t made;      /* candidates made (queued for the gate, or failed before it) */
    int32_t pending;   /* made and not yet answered */
    int32_t done;      /* results recorded */
    int32_t ok;        /* results with outcome ok */
    int32_t dups;      /* proposals that were an existing binary */
    int32_t stale;     /* proposals in a row that made nothing new (dup or no valid point) */
    int32_t exhausted; /* 1: nothing new can be proposed; counts as finished */
    int32_t retimes;   /* interleaved re-timings run */
    int32_t fusion_noted;
    uint32_t generation; /* bumped on every change the progress display shows */
} kiln_bb_problem;

/* One node of a search tree; links are node indices (-1: none). */
typedef struct {
    int32_t problem, parent, first_child, next_sibling;
    int32_t n_children;  /* live children (not DEAD) */
    int16_t family;      /* registry index; -1 at the root */
    int16_t draft;       /* 0: main tree; k: draft k */
    int32_t status;      /* KILN_BB_NODE_* */
    int32_t flags;       /* KILN_BB_FLAG_* */
    int32_t agent;       /* kiln_agent_kind that proposed it; -1 at the root */
    int32_t owner;       /* worker slot while CREATING, -1 otherwise */
    int32_t expand_fail; /* proposals below it that made nothing new */
    int32_t virtual_loss;
    int64_t params[KILN_BB_MAX_PARAMS];
    int64_t visits;
    double value_sum;
    double reward;  /* its own reward once evaluated */
    double time_us; /* its own time when ok, else < 0 */
    double best;    /* best reward below it (itself included) */
    int64_t candidate_id;
    int64_t store_node_id;
} kiln_bb_node;

/* One entry of the dedupe set: (problem, binary hash) -> the node and candidate that own it. */
typedef struct {
    uint64_t hash; /* 0: empty */
    int32_t problem;
    int32_t node;
    int64_t candidate_id;
} kiln_bb_dedupe;

/* Gate queue slot states. */
enum { KILN_BB_SLOT_FREE = 0, KILN_BB_SLOT_QUEUED, KILN_BB_SLOT_TAKEN, KILN_BB_SLOT_DONE };

/* One slot of the gate queue: a candidate and, once answered, its result. */
typedef struct {
    uint64_t seq; /* position in the queue's history */
    int32_t state;
    int32_t problem;
    int32_t node;
    int32_t gate; /* worker slot of the gate that took it, -1 */
    int64_t candidate_id;
    int32_t outcome; /* kiln_outcome once DONE, -1 before */
    int32_t pad0;
    double reward;
} kiln_bb_slot;

/* Worker (agent or gate process) slots: who is alive and what they hold. */
enum { KILN_BB_ROLE_NONE = 0, KILN_BB_ROLE_AGENT, KILN_BB_ROLE_GATE };
typedef struct {
    int32_t role;
    int32_t kind; /* agent: kiln_agent_kind; gate: device index */
    int32_t pid;
    int32_t held_node; /* agent: the node whose path carries its virtual loss, -1 */
    int32_t slot;      /* gate: the queue slot it is working on, -1 */
    int32_t restarts;
    int64_t work_done; /* candidates made (agent) or evaluated (gate) */
} kiln_bb_worker;

typedef struct {
    int32_t max_problems, max_nodes, dedupe_slots, queue_slots, max_workers;
} kiln_bb_caps;

/* The header at offset 0. Everything after it is found through the offsets, sized by the caps. */
typedef struct {
    uint64_t magic;
    uint32_t layout_version;
    uint32_t header_bytes;
    uint64_t total_bytes;
    /* sizes of the entry types, so that a build with another layout is refused even when the
     * version was not bumped */
    uint32_t problem_bytes, node_bytes, dedupe_bytes, slot_bytes, worker_bytes;
    kiln_bb_caps caps;
    uint64_t off_problems, off_nodes, off_dedupe, off_queue, off_workers;

    pthread_mutex_t lock;     /* PTHREAD_PROCESS_SHARED | PTHREAD_MUTEX_ROBUST */
    uint64_t lock_recoveries; /* times a locker found the previous owner dead */

    int32_t n_problems;
    int32_t n_nodes;
    int32_t n_workers;
    int32_t stop; /* 1: agents stop proposing, gates stop taking; read with __atomic */
    int64_t n_dedupe;
    uint64_t queue_head;         /* next seq to take */
    uint64_t queue_tail;         /* next seq to push */
    uint64_t generation;         /* bumped on every change (progress redraws on change) */
    uint64_t gate_errors_in_row; /* evaluations without a verdict, in a row (infrastructure) */
} kiln_bb_header;

typedef struct kiln_bb kiln_bb;

/* "/kiln-<16 hex of the run dir's real path>-<pid>": the segment's name for a run. Caller frees. */
char *kiln_bb_name_for(const char *run_dir, pid_t pid);

/* Removes every kiln blackboard ("/kiln-<16 hex>-<pid>") whose coordinator is dead (left by kill
 * -9 or a crash). Returns how many were removed. */
int kiln_bb_sweep_stale(void);

/* Creates the segment (O_EXCL, mode 0600), sizes it for caps, zeroes it, writes the header and
 * initialises the mutex. KILN_ERR_IO with errno's text when the segment cannot be made. */
int kiln_bb_create(const char *name, const kiln_bb_caps *caps, kiln_bb **out, kiln_err *err);

/* Maps an existing segment and checks magic, layout version, entry sizes and total size:
 * KILN_ERR_FORMAT naming the difference when they do not match. */
int kiln_bb_attach(const char *name, kiln_bb **out, kiln_err *err);

/* Unmaps (and closes) this process's view; the segment lives on until unlinked. */
void kiln_bb_detach(kiln_bb *bb);
/* shm_unlink of the segment's name; 0 on success. */
int kiln_bb_unlink(const char *name);
const char *kiln_bb_name(const kiln_bb *bb);

/* Takes the lock. Returns 0, or 1 when the previous owner died holding it: the mutex was made
 * consistent again (and lock_recoveries bumped); the caller holds it either way. Writers keep every
 * update so ordered that a holder killed at any point leaves the data usable (see the essay). */
int kiln_bb_lock(kiln_bb *bb);
void kiln_bb_unlock(kiln_bb *bb);

kiln_bb_header *kiln_bb_hdr(kiln_bb *bb);
kiln_bb_problem *kiln_bb_problem_at(kiln_bb *bb, int i);
kiln_bb_node *kiln_bb_node_at(kiln_bb *bb, int i);
kiln_bb_worker *kiln_bb_worker_at(kiln_bb *bb, int i);
kiln_bb_slot *kiln_bb_slot_at(kiln_bb *bb, int i);

/* Under the lock. Whether a worker other than `except` (-1: any) holds a selection (a node with its
 * virtual loss) in problem pi: a problem is not over while one is being turned into a candidate. */
int kiln_bb_selection_held(kiln_bb *bb, int pi, int except);

/* Under the lock. Appends a problem (zeroed, incumbent/draft fields -1); returns its index or -1
 * when full. */
int kiln_bb_problem_add(kiln_bb *bb, int64_t store_id, const char *name);

/* Under the lock. Appends a node of problem under parent (-1: it is the root) with the given status
 * and links it as parent's first child. Returns its index, or -1 when the node array is full. */
int kiln_bb_node_add(kiln_bb *bb, int problem, int parent, int status);

/* Under the lock. Marks a node DEAD and unlinks it from its parent's live count. */
void kiln_bb_node_kill(kiln_bb *bb, int node);

/* Under the lock. Inserts (problem, hash) -> (node, candidate_id). Returns 1 inserted, 0 when the
 * key is there already (*found, optional, gets the entry), -1 when the set is full. hash 0 is
 * stored as 1 (0 marks empty slots). */
int kiln_bb_dedupe_insert(kiln_bb *bb, int problem, uint64_t hash, int node, int64_t candidate_id,
                          kiln_bb_dedupe *found);
/* Under the lock. The entry for (problem, hash) or NULL. */
kiln_bb_dedupe *kiln_bb_dedupe_find(kiln_bb *bb, int problem, uint64_t hash);

/* Under the lock. Queues a candidate for the gate. Returns the slot index, or -1 when the ring is
 * full (the slot a push would reuse is still queued or taken). */
int kiln_bb_queue_push(kiln_bb *bb, int problem, int node, int64_t candidate_id);
/* Under the lock. Takes the oldest queued candidate for gate worker slot `gate`; returns its slot
 * index or -1 when nothing is queued. FIFO over all producers. */
int kiln_bb_queue_take(kiln_bb *bb, int gate);
/* Under the lock. Records the answer of a taken slot and frees it for reuse. */
void kiln_bb_queue_done(kiln_bb *bb, int slot, int outcome, double reward);
/* Under the lock. Slots queued or taken. */
int kiln_bb_queue_busy(kiln_bb *bb);

/* Under the lock. A free worker slot (role NONE) or -1. */
int kiln_bb_worker_add(kiln_bb *bb, int role, int kind);

/* The stop flag, read and written atomically (no lock needed). */
int kiln_bb_stopping(kiln_bb *bb);
void kiln_bb_set_stop(kiln_bb *bb);

/* Under the lock. Bumps the run-wide and the problem's change counters. */
void kiln_bb_touch(kiln_bb *bb, int problem);

#endif
