/* Serving endpoints (links.h). */
#include "links.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int links_parse(links_t *l, const char *spec, int stages)
{
    memset(l, 0, sizeof *l);
    l->stages = stages;
    if (!spec) return MP_FAIL("--links: missing");
    if (strncmp(spec, "tcp:", 4)) {
        if (strlen(spec) >= sizeof l->dir) return MP_FAIL("--links %s: too long", spec);
        snprintf(l->dir, sizeof l->dir, "%s", spec);
        return MP_OK;
    }
    char *end;
    const long port = strtol(spec + 4, &end, 10);
    if (*end != ':' || port < 1 || port + 10 + 4L * stages > 65535)
        return MP_FAIL("--links %s: give tcp:PORT:HOSTS with PORT + %d below 65536", spec, 10 + 4 * stages);
    l->tcp = 1, l->port = (int)port;
    int n = 0;
    for (const char *p = end + 1; *p && n < 1 + 2 * stages;) {
        const size_t len = strcspn(p, ",");
        if (!len || len >= sizeof l->host[0]) return MP_FAIL("--links %s: an empty or too long host name", spec);
        memcpy(l->host[n++], p, len);
        p += len + (p[len] == ',');
    }
    if (n != 1 + 2 * stages)
        return MP_FAIL("--links %s: give %d hosts (the front end, then each stage's primary and standby)", spec,
                       1 + 2 * stages);
    return MP_OK;
}

void links_ep(const links_t *l, int what, int k, int r, char *buf, size_t n)
{
    if (!l->tcp) {
        static const char *name[] = {"link", "delta", "confirm", "report"};
        if (what == LINK_IN || what == LINK_DELTA) snprintf(buf, n, "ipc://%s/%s%d", l->dir, name[what], k);
        else snprintf(buf, n, "ipc://%s/%s", l->dir, name[what]);
        return;
    }
    if (what == LINK_CONFIRM || what == LINK_REPORT || (what == LINK_IN && k == l->stages))
        snprintf(buf, n, "tcp://%s:%d", l->host[0], l->port + (what == LINK_CONFIRM ? 1 : what == LINK_REPORT ? 2 : 0));
    else
        snprintf(buf, n, "tcp://%s:%d", l->host[1 + 2 * k + r], l->port + 10 + 4 * k + 2 * r + (what == LINK_DELTA));
}

void links_bindable(char *ep, size_t n)
{
    const char *colon = strrchr(ep, ':');
    if (strncmp(ep, "tcp://", 6) || !colon) return;
    char port[16];
    snprintf(port, sizeof port, "%s", colon + 1);
    snprintf(ep, n, "tcp://*:%s", port);
}
