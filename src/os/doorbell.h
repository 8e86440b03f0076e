/* SPDX-License-Identifier: MIT */
/* doorbell.h - an eventfd doorbell's count emptied without ever blocking; see doorbell.c. */
#ifndef PM_DOORBELL_H
#define PM_DOORBELL_H

/* Empties the count of eventfd fd (a doorbell that rang) and returns,
 * whether the count was there, already taken by someone else, or the
 * file was made blocking by another holder. Keeps errno. */
void pm__doorbell_drain(int fd);

#endif /* PM_DOORBELL_H */
