/* The host link of a node, shared by its ranks (node-coordinated swapping, ARCHITECTURE.md §6):
 * one lock per direction (device to host, host to device) in memory every rank of the node maps
 * (an MPI shared-memory window), so that no two ranks of a node move data the same way at once
 * while one may swap out as another swaps in. The copy engines take them (copier.h). */
#ifndef MP_NODELINK_H
#define MP_NODELINK_H

#include <mpi.h>

typedef struct {
    MPI_Win win;
    void *locks;   /* two process-shared robust mutexes in the window */
    int on;
} nodelink_t;

/* Collective over node (ranks sharing memory). MP_OK or MP_ERR (message printed). */
int nodelink_init(nodelink_t *l, MPI_Comm node);
/* Collective over the node again. */
void nodelink_free(nodelink_t *l);

/* The lock of direction dir (0 device to host, 1 host to device), for copier_link_t. A rank that
 * died holding it leaves it to the next taker (robust mutex), not locked forever. */
void nodelink_lock(void *l, int dir);
void nodelink_unlock(void *l, int dir);

#endif
