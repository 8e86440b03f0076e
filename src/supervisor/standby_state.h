/* SPDX-License-Identifier: MIT */
/*
 * standby_state.h - a slot's warm standby, the type only: types.h includes
 * it for pm__slot. Its calls are in standby.h, which includes types.h; a
 * second module below types.h (beside output.h) would make the modules
 * that include types.h a cycle.
 */
#ifndef PM_SUPERVISOR_STANDBY_STATE_H
#define PM_SUPERVISOR_STANDBY_STATE_H

#include <stdint.h>
#include <sys/types.h>

/* Fork mode with pm_options_set_warm_standby: the next incarnation, forked
 * ahead onto the spare channel and blocked until the crash it replaces
 * (standby.c, standby_fork.c). pid 0: none. */
typedef struct pm__standby {
    pid_t pid;
    int pidfd;            /* polled (PM__TAG_STANDBY) while armed */
    int go_fd;            /* its go eventfd: writing 1 starts it (a blocking read there) */
    int armed;
    uint64_t incarnation; /* the incarnation it becomes; its channel is the slot's spare */
    unsigned leaf_gen;    /* the slot's leaf made ahead, which it joined at its start; 0: none (moved when taken) */
} pm__standby;

#endif /* PM_SUPERVISOR_STANDBY_STATE_H */
