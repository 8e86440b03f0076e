/* SPDX-License-Identifier: MIT */
/*
 * scrub.h - a fork-mode child's clean start (scrub.c): the vector
 * registers cleared, the supervisor's dead stack and live frames zeroed.
 * Each runs in the fork child only, with every signal blocked.
 */
#ifndef PM_SCRUB_H
#define PM_SCRUB_H

/* First thing in the child, before any call that could go through an
 * unbound PLT entry or take a signal (both store every vector register
 * on the stack). */
void pm__clear_vector_registers(void);

/* In the supervisor, before each fork-mode fork: what the child's stack
 * walk needs (the page size) read here, so that the child does not call
 * sysconf. A fork copies the page-table entries of the memory the
 * supervisor wrote, not of its code or read-only data: each page of either
 * that the child is first to touch costs it a page fault, which a virtual
 * machine makes slower still (doc/benchmarks.md has the figures). */
void pm__scrub_prime(void);

/* Zeroes the resident stack pages below the caller's frame, down to the
 * first page the supervisor never touched. */
void pm__wipe_dead_stack(void);

/* Zeroes [from, to): the supervisor's frames above the caller's, up to
 * the CFA its public entry noted (to NULL: nothing). */
void pm__wipe_live_frames(char *from, char *to);

#endif /* PM_SCRUB_H */
