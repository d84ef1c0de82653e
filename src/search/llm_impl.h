/* llm_impl.h: what the llm agent's files share: llm_text.c's growing string and UTF-8 repair (used
 * by llm.c, asking, and llm_prompt.c, the prompt and its context), and llm_prompt.c's system
 * message (used by llm.c). */
#ifndef KILN_LLM_IMPL_H
#define KILN_LLM_IMPL_H

#include "llm.h"

/* A growing NUL-terminated string; zero-initialise, then add; take hands the heap string over. */
typedef struct {
    char *p;
    size_t n, cap;
} llm_buf;

void llm_buf_add(llm_buf *b, const char *s, size_t n);
void llm_buf_puts(llm_buf *b, const char *s);
void llm_buf_printf(llm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The string ("" when nothing was added); b is empty again. */
char *llm_buf_take(llm_buf *b);

/* A copy of n bytes that is valid UTF-8 without NUL bytes: each byte that starts no valid sequence
 * becomes '?', NUL becomes a space. Never fails. */
char *llm_utf8_clean(const char *s, size_t n);

/* The system message of every request. */
const char *llm_system_prompt(void);

#endif
