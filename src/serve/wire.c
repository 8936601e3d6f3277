/* Serving messages (wire.h). */
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <zmq.h>

int wire_secret_parse(const char *hex, unsigned char secret[WIRE_SECRET_BYTES])
{
    if (!hex || strlen(hex) != 2 * WIRE_SECRET_BYTES)
        return MP_FAIL("the job secret must be %d hex digits (MINDPIPE_SERVE_SECRET)", 2 * WIRE_SECRET_BYTES);
    for (int i = 0; i < WIRE_SECRET_BYTES; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return MP_FAIL("the job secret holds a character that is not hex");
        secret[i] = (unsigned char)v;
    }
    return MP_OK;
}

int wire_secret_new(unsigned char secret[WIRE_SECRET_BYTES], char hex[2 * WIRE_SECRET_BYTES + 1])
{
    if (getrandom(secret, WIRE_SECRET_BYTES, 0) != WIRE_SECRET_BYTES) return MP_FAIL("getrandom for the job secret failed");
    for (int i = 0; i < WIRE_SECRET_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", secret[i]);
    return MP_OK;
}

int wire_socket_opts(void *sock)
{
    /* reconnect after 20 ms (ZeroMQ's default is 100): a replacement stage is found sooner */
    const int linger = 0, ivl = 1000, ttl = 5000, tmo = 5000, reconnect = 20;
    ZMQ_TRY(zmq_setsockopt(sock, ZMQ_RECONNECT_IVL, &reconnect, sizeof reconnect), err);
    ZMQ_TRY(zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger), err);
    ZMQ_TRY(zmq_setsockopt(sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl), err);
    ZMQ_TRY(zmq_setsockopt(sock, ZMQ_HEARTBEAT_TTL, &ttl, sizeof ttl), err);
    ZMQ_TRY(zmq_setsockopt(sock, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo), err);
    return MP_OK;
err:
    return MP_ERR;
}

int wire_msg_build(zmq_msg_t *m, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows, float **x_p)
{
    const size_t nr = (size_t)h->B * sizeof *rows, nx = (size_t)h->B * (size_t)h->width * sizeof(float);
    ZMQ_TRY(zmq_msg_init_size(m, WIRE_SECRET_BYTES + sizeof *h + nr + nx), err);
    unsigned char *p = zmq_msg_data(m);
    memcpy(p, secret, WIRE_SECRET_BYTES);
    memcpy(p + WIRE_SECRET_BYTES, h, sizeof *h);
    if (nr) memcpy(p + WIRE_SECRET_BYTES + sizeof *h, rows, nr);
    *x_p = (float *)(void *)(p + WIRE_SECRET_BYTES + sizeof *h + nr); /* 4-aligned: the header is 40 bytes, a row 12 */
    return MP_OK;
err:
    return MP_ERR;
}

static int wire_send_flags(void *sock, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows,
                           const float *x, int flags)
{
    zmq_msg_t m;
    float *dst;
    if (wire_msg_build(&m, secret, h, rows, &dst) != MP_OK) return MP_ERR;
    if (h->B && h->width) memcpy(dst, x, (size_t)h->B * (size_t)h->width * sizeof(float));
    if (zmq_msg_send(&m, sock, flags) < 0) {
        const int e = zmq_errno();
        zmq_msg_close(&m);
        if (e == EAGAIN && (flags & ZMQ_DONTWAIT)) return 0;
        return MP_FAIL("ZeroMQ: zmq_msg_send failed: %s", zmq_strerror(e));
    }
    return 1;
}

int wire_immediate(void *sock)
{
    const int on = 1;
    ZMQ_TRY(zmq_setsockopt(sock, ZMQ_IMMEDIATE, &on, sizeof on), err);
    return MP_OK;
err:
    return MP_ERR;
}

int wire_step_current(wire_era_t *e, const wire_hdr_t *h)
{
    if (h->kind != WIRE_STEP) return 1;
    if (!e->open && h->B > 0) return 0;
    if (e->open && h->aux < e->era) return 0;
    e->open = 1, e->era = h->aux;
    return 1;
}

void wire_retarget(void *push, char (*ep)[300], int *linked, uint64_t gen, const char *who)
{
    const int to = (int)(gen % 2), from = 1 - to;
    if (*linked >> from & 1) {
        if (zmq_disconnect(push, ep[from]) != 0)
            MP_WARN("serving: %s: disconnecting from a replaced primary (%s): %s", who, ep[from], zmq_strerror(zmq_errno()));
        else MP_WARN("serving: %s: no step goes to the replaced primary at %s any more", who, ep[from]);
        *linked &= ~(1 << from);
    }
    if (!(*linked >> to & 1)) { /* a primary restarted in this slot: its connection completes in a moment */
        if (zmq_connect(push, ep[to]) != 0)
            MP_WARN("serving: %s: connecting to the new primary (%s): %s", who, ep[to], zmq_strerror(zmq_errno()));
        else *linked |= 1 << to;
    }
}

int wire_send(void *sock, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows, const float *x)
{
    return wire_send_flags(sock, secret, h, rows, x, 0) == 1 ? MP_OK : MP_ERR;
}

int wire_post(void *sock, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows, const float *x)
{
    return wire_send_flags(sock, secret, h, rows, x, ZMQ_DONTWAIT);
}

/* Constant-time comparison: how long it takes says nothing of where a guess went wrong. */
static int secret_ok(const unsigned char *a, const unsigned char *b)
{
    unsigned char d = 0;
    for (int i = 0; i < WIRE_SECRET_BYTES; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* One received frame into the outputs: 1, or MP_ERR when malformed (reported), 2 when it lacks the
 * secret (reported; dropped). */
static int wire_parse(const unsigned char *p, size_t n, const unsigned char *secret, wire_hdr_t *h, wire_row_t *rows,
                      int max_rows, float *x, size_t max_floats)
{
    if (n < WIRE_SECRET_BYTES || !secret_ok(p, secret))
        return MP_WARN("dropped a serving message of %zu bytes without the job's secret", n), 2;
    if (n < WIRE_SECRET_BYTES + sizeof *h) return MP_FAIL("a serving message of %zu bytes is shorter than its header", n);
    memcpy(h, p + WIRE_SECRET_BYTES, sizeof *h);
    if (h->magic != WIRE_MAGIC || h->B < 0 || h->B > max_rows || h->width < 0)
        return MP_FAIL("a serving message with a bad header (magic %08x, %d rows of %d floats)", h->magic, h->B, h->width);
    const size_t nr = (size_t)h->B * sizeof *rows, nf = (size_t)h->B * (size_t)h->width;
    if (nf > max_floats || n != WIRE_SECRET_BYTES + sizeof *h + nr + nf * sizeof(float))
        return MP_FAIL("a serving message of %zu bytes does not hold %d rows of %d floats", n, h->B, h->width);
    if (nr) memcpy(rows, p + WIRE_SECRET_BYTES + sizeof *h, nr);
    if (nf) memcpy(x, p + WIRE_SECRET_BYTES + sizeof *h + nr, nf * sizeof(float));
    return 1;
}

int wire_recv(void *sock, const unsigned char *secret, int timeout_ms, wire_hdr_t *h, wire_row_t *rows, int max_rows,
              float *x, size_t max_floats)
{
    for (;;) {
        /* timeout 0 (draining a queue): a receive that does not wait, without zmq_poll, which makes
         * a poll(2) call before it looks at the socket's queue */
        if (timeout_ms != 0) {
            zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
            const int r = zmq_poll(&it, 1, timeout_ms);
            if (r < 0 && zmq_errno() == EINTR) continue;
            ZMQ_TRY(r, err);
            if (r == 0) return 0;
        }
        zmq_msg_t m;
        ZMQ_TRY(zmq_msg_init(&m), err);
        if (zmq_msg_recv(&m, sock, timeout_ms == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            const int e = zmq_errno();
            zmq_msg_close(&m);
            if (e == EAGAIN && timeout_ms == 0) return 0;
            if (e == EINTR || e == EAGAIN) continue;
            return MP_FAIL("ZeroMQ: zmq_msg_recv failed: %s", zmq_strerror(e));
        }
        const int rc = wire_parse(zmq_msg_data(&m), zmq_msg_size(&m), secret, h, rows, max_rows, x, max_floats);
        zmq_msg_close(&m);
        if (rc != 2) return rc;
    }
err:
    return MP_ERR;
}
