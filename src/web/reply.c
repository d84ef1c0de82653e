/* reply.c: what every part of the dashboard's server answers with: an error reply ({"error",
 * "status"} as JSON) and the strict id syntax of paths, parameters and stream cursors. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <string.h>

#include "web_impl.h"

void web_reply_error(web_reply *r, int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", msg);
    cJSON_AddNumberToObject(j, "status", status);
    if (!r->body_static)
        free(r->body);
    r->body = cJSON_PrintUnformatted(j);
    KILN_ASSERT(r->body);
    r->len = strlen(r->body);
    r->body_static = 0;
    r->status = status;
    r->content_type = "application/json";
    cJSON_Delete(j);
}

int web_parse_id(const char *text, int64_t *out) {
    if (!text || !*text)
        return -1;
    size_t n = 0;
    for (; text[n]; n++)
        if (text[n] < '0' || text[n] > '9')
            return -1;
    while (n > 1 && *text == '0') { /* leading zeros say nothing */
        text++;
        n--;
    }
    if (n > 16)
        return -2;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (text[i] - '0');
    if (v > WEB_MAX_ID)
        return -2;
    *out = v;
    return 0;
}
