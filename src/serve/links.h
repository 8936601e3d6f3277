/* Where a serving job's processes meet (ARCHITECTURE.md §10): the ZeroMQ endpoints of the
 * ring, the state deltas, the confirmations and the reports, from one description every process is
 * given (`--links`):
 *
 *   DIR                     one machine: ipc sockets in DIR (mode 0700), the front end forks the
 *                           stages; a standby binds its primary's socket path when promoted.
 *   tcp:PORT:H,H0,B0,H1,B1,…  one process per host (jobs/slurm/serve.sbatch): the front end on H, stage
 *                           k's host slot 0 on Hk (its first primary) and host slot 1 on Bk (its
 *                           first standby); ports PORT (ring into the front end), PORT+1
 *                           (confirmations), PORT+2 (reports and heartbeats), and for stage k slot r
 *                           PORT+10+4k+2r (its input) and PORT+11+4k+2r (its deltas). The slots
 *                           swap roles at each promotion (the primary of a stage's generation g runs
 *                           in slot g mod 2); a standby connects to the other slot's deltas and binds
 *                           its own input when promoted: upstream connects to both of a stage's
 *                           inputs and sends only on completed connections (ZMQ_IMMEDIATE).
 */
#ifndef MP_LINKS_H
#define MP_LINKS_H

#include <stddef.h>

#define LINKS_MAX_STAGES 64

enum { LINK_IN, LINK_DELTA, LINK_CONFIRM, LINK_REPORT };

typedef struct {
    int tcp;                                  /* 0: ipc in dir */
    char dir[4096];
    int port, stages;
    char host[1 + 2 * LINKS_MAX_STAGES][256]; /* front end, then primary and standby of each stage */
} links_t;

/* Parses --links for `stages` stages. MP_OK, or MP_ERR naming what is wrong. */
int links_parse(links_t *l, const char *spec, int stages);
/* Endpoint `what` of stage k (k = stages: the front end's ring input) in host slot r (0 or 1; ipc
 * ignores it) into buf (n bytes). LINK_CONFIRM and LINK_REPORT are the front end's
 * (k, r ignored). */
void links_ep(const links_t *l, int what, int k, int r, char *buf, size_t n);
/* A tcp endpoint to bind: its host replaced by * (every interface of this host: a host name is
 * what others connect to, not what ZeroMQ binds; the job's secret guards what arrives); an ipc one
 * unchanged. */
void links_bindable(char *ep, size_t n);

#endif
