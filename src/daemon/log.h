/* SPDX-License-Identifier: MIT */
/* log.h - the daemon's log: one line per event on stderr, logfmt or JSON. */
#ifndef PMD_LOG_H
#define PMD_LOG_H

#include <stddef.h>

enum pmd_log_format { PMD_LOG_TEXT = 1, PMD_LOG_JSON = 2 };
enum pmd_log_level { PMD_LOG_ERROR = 1, PMD_LOG_WARN, PMD_LOG_INFO, PMD_LOG_DEBUG };

/*
 * Formats one line (with '\n') into buf: format PMD_LOG_TEXT gives logfmt
 * "ts=... level=... event=... k=v ...", PMD_LOG_JSON one object. kv holds
 * nkv key/value pairs (2 * nkv strings). Values made only of digits (with an
 * optional leading '-') are numbers in JSON; text values are quoted when they
 * need it (logfmt) and always escaped (JSON). Returns the length, truncated
 * to size - 1. Pure.
 */
size_t pmd_log_format(char *buf, size_t size, int format, const char *ts, const char *level,
                      const char *event, const char *const *kv, size_t nkv);

/* Sets the format and the most verbose level pmd_log writes; until then it
 * writes text at info. */
void pmd_log_setup(int format, int max_level);

/* Writes a line, time-stamped now, to stderr if level is not above the
 * configured one. */
void pmd_log(int level, const char *event, const char *const *kv, size_t nkv);

/* "SIGTERM" for SIGTERM, the number for a signal without a name; in buf. */
const char *pmd_signal_name(int sig, char *buf, size_t size);

#endif /* PMD_LOG_H */
