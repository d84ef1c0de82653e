/* db.c: the dashboard's pool of read-only store handles (server.c's essay says why handles are
 * pooled rather than per thread, and why they come from kiln_store_open and nothing else). */
#include "web_impl.h"

int web_db_acquire(kiln_web *w, kiln_store **out, kiln_err *err) {
    *out = NULL;
    pthread_mutex_lock(&w->pool_mu);
    if (w->n_pool > 0)
        *out = w->pool[--w->n_pool];
    pthread_mutex_unlock(&w->pool_mu);
    if (*out)
        return KILN_OK;
    return kiln_store_open(w->run_dir, 1, out, err);
}

void web_db_release(kiln_web *w, kiln_store *s, int broken) {
    if (!s)
        return;
    /* A handle still inside a read snapshot would pin it: it is not reused. */
    if (!broken && kiln_store_read_end(s, NULL) != KILN_OK)
        broken = 1;
    pthread_mutex_lock(&w->pool_mu);
    if (!broken && w->n_pool < WEB_POOL_MAX) {
        w->pool[w->n_pool++] = s;
        s = NULL;
    }
    pthread_mutex_unlock(&w->pool_mu);
    kiln_store_close(s);
}

void web_db_close_all(kiln_web *w) {
    pthread_mutex_lock(&w->pool_mu);
    for (int i = 0; i < w->n_pool; i++)
        kiln_store_close(w->pool[i]);
    w->n_pool = 0;
    pthread_mutex_unlock(&w->pool_mu);
}
