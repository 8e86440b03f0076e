/* SPDX-License-Identifier: MIT */
/* doorbell.h - a doorbell (eventfd or socket pair) emptied without ever blocking; see doorbell.c. */
#ifndef PM_DOORBELL_H
#define PM_DOORBELL_H

/* Empties doorbell fd (an eventfd's count, or every byte of a socket
 * pair's) and returns, whether the count was there, already taken by
 * someone else, or the file was made blocking by another holder. 1 when
 * every writing end of a socket-pair doorbell is closed (it reads end of
 * file: readable for ever, and nobody can ring it again), else 0. Keeps
 * errno. */
int pm__doorbell_drain(int fd);

/* A doorbell whose reader must not share the writer's open file
 * description: a socket pair, *rd the reader's end (it can only read),
 * *wr the writer's (it can only write; ring.c sends on it with
 * MSG_DONTWAIT | MSG_NOSIGNAL), both close-on-exec and non-blocking. 0 or
 * -errno with nothing open. */
int pm__doorbell_pair(int *rd, int *wr);

#endif /* PM_DOORBELL_H */
