/* ltp_place.c: where received payloads land, so a driver can skip copies.
 *
 * A receive context keeps a message in a buffer of the core's, and taking the message copies it
 * into the application's; a driver reading a datagram into its own slot and the core copying the
 * payload into the context makes two more passes over every byte than a kernel transport makes.
 * Two ways around them, both optional:
 *   - posted buffers: the application names its buffer for a message before the message opens
 *     (ltp_core_rx_post); the context then uses it, and taking the message into that same buffer
 *     copies nothing. The core writes to it only until the message is taken or unposted.
 *   - guessed places: a sender sends a message's packets in index order, so the next DATA from a
 *     peer most likely continues the last one; ltp_core_rx_guess says where those payloads go, a
 *     driver reads them straight there (a scatter read), and ltp_core_input_split takes a DATA
 *     whose payload is already in place without copying it. A guess only ever names a part of an
 *     open message that has not arrived, so a wrong one leaves bytes where taking the message
 *     zeroes them anyway.
 */
#include "ltp_internal.h"

#include <stdlib.h>
#include <string.h>

/* Each peer keeps its own posts, so finding one costs what that peer posted, whatever N is. */
static post_t *post_find(const peer_t *p, uint32_t msg_id, uint16_t seg)
{
    for (uint32_t i = 0; i < p->n_posts; i++) {
        post_t *q = &p->posts[i];
        if (q->msg_id == msg_id && q->segment == seg) return q;
    }
    return NULL;
}

/* The application's buffer for a message about to open, or NULL (none, or too small). */
uint8_t *rx_posted(const ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, uint32_t total)
{
    const post_t *q = post_find(&c->peers[peer], msg_id, seg);
    return q && q->cap >= total ? q->buf : NULL;
}

/* Move an open message out of a posted buffer into one of the core's. */
static int own_buffer(ltp_core_t *c, peer_t *p, rxmsg_t *m)
{
    if (!m->posted) return LTP_OK;
    uint8_t *own = malloc(m->total);
    if (!own) {
        rx_release(c, p, m);   /* never write to the application's buffer again: it resends */
        index_touch(c, p);
        return LTP_ENOMEM;
    }
    memcpy(own, m->buf, m->total);
    m->buf = own;
    m->posted = 0;
    return LTP_OK;
}

int ltp_core_rx_post(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, void *buf, uint32_t cap)
{
    peer_t *p = core_peer(c, peer);
    if (!p || !buf) return LTP_EINVAL;
    post_t *q = post_find(p, msg_id, seg);
    if (!q) {
        if (p->n_posts == p->cap_posts) {
            uint32_t n = p->cap_posts ? 2 * p->cap_posts : 4;
            post_t *np = realloc(p->posts, n * sizeof *np);
            if (!np) return LTP_ENOMEM;
            p->posts = np;
            p->cap_posts = n;
        }
        q = &p->posts[p->n_posts++];
    }
    *q = (post_t){peer, msg_id, cap, seg, buf};
    rxmsg_t *m = rx_lookup(c, p, msg_id, seg);
    if (m && m->buf != buf) {   /* already open: what arrived moves over */
        if (cap < m->total) return own_buffer(c, p, m);
        memcpy(buf, m->buf, m->total);
        if (!m->posted) free(m->buf);
        m->buf = buf;
        m->posted = 1;
    }
    return LTP_OK;
}

int ltp_core_rx_unpost(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg)
{
    peer_t *p = core_peer(c, peer);
    if (!p) return LTP_EINVAL;
    post_t *q = post_find(p, msg_id, seg);
    if (!q) return LTP_ENOTFOUND;
    *q = p->posts[--p->n_posts];
    rxmsg_t *m = rx_lookup(c, p, msg_id, seg);
    return m ? own_buffer(c, p, m) : LTP_OK;
}

void rx_note_stored(peer_t *p, const rxmsg_t *m, uint32_t index)
{
    p->has_last = 1;
    p->last_msg_id = m->msg_id;
    p->last_seg = m->segment;
    p->last_idx = index;
}

int ltp_core_rx_guess(ltp_core_t *c, int peer, ltp_rx_guess_t *g, int n)
{
    peer_t *p = core_peer(c, peer);
    if (!p || !g || n < 0) return LTP_EINVAL;
    if (!p->has_last) return 0;
    const rxmsg_t *m = rx_lookup(c, p, p->last_msg_id, p->last_seg);
    if (!m || m->closed) return 0;
    int k = 0;
    for (uint32_t i = p->last_idx + 1; k < n && i < m->count; i++, k++) {
        if (m->bits[i / 64] >> (i % 64) & 1) break;   /* arrived already: the order broke */
        uint32_t off = i * m->chunk;
        g[k] = (ltp_rx_guess_t){m->msg_id, i, m->segment, m->buf + off,
                                i + 1 < m->count ? m->chunk : m->total - off, m->context};
    }
    return k;
}

int ltp_core_rx_guess_holds(const ltp_core_t *c, int peer, const ltp_rx_guess_t *g)
{
    const peer_t *p = core_peer(c, peer);
    if (!p || !g) return 0;
    const rxmsg_t *m = rx_lookup(c, p, g->msg_id, g->segment);
    return m && m->context == g->context && g->index < m->count &&
           m->buf + (size_t)g->index * m->chunk == g->dst;
}
