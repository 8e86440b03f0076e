/* SPDX-License-Identifier: MIT */
/*
 * status.h - the slot status fields: the health endpoint writes them as the
 * /status JSON, `procmesh status` reads them back and prints the table. One
 * table of fields serves both, so the two cannot disagree.
 */
#ifndef PMD_STATUS_H
#define PMD_STATUS_H

#include <stddef.h>
#include <stdio.h>

#include "procmesh.h"

/* The /status body: {"ready":..,"draining":..,"slots":[{...},...]} and a
 * newline. Returns the length written (at most size - 1, NUL-terminated). */
size_t pmd_status_json(pm_cluster *c, int ready, int draining, char *buf, size_t size);

/* Prints the slot table (a header line, one line per slot) of a /status
 * body to out. Returns the number of slots printed; a slot object that does
 * not read back is skipped. */
int pmd_status_print(FILE *out, const char *body);

#endif /* PMD_STATUS_H */
