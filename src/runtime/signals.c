#include "signals.h"

#include <signal.h>
#include <string.h>

/* A handler can only talk to the program through a static of this type: the one piece of global
 * state outside the run context, written only here. */
static volatile sig_atomic_t pending;

static void on_signal(int sig) { pending = sig; }

void signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a signal must not turn a read or an MPI poll into an error */
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int signals_pending(void) { return (int)pending; }
