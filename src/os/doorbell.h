/* SPDX-License-Identifier: MIT */
/* doorbell.h - a doorbell (eventfd or pipe) emptied without ever blocking; see doorbell.c. */
#ifndef PM_DOORBELL_H
#define PM_DOORBELL_H

/* Empties doorbell fd (an eventfd's count, or every byte in a pipe) and
 * returns, whether the count was there, already taken by someone else, or
 * the file was made blocking by another holder. Keeps errno. */
void pm__doorbell_drain(int fd);

#endif /* PM_DOORBELL_H */
