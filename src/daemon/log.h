/* SPDX-License-Identifier: MIT */
/* log.h - the daemon's log: one line per event on stderr, logfmt or JSON. */
#ifndef PMD_LOG_H
#define PMD_LOG_H

#include <stddef.h>

enum pmd_log_format { PMD_LOG_TEXT = 1, PMD_LOG_JSON = 2 };
enum pmd_log_level { PMD_LOG_ERROR = 1, PMD_LOG_WARN, PMD_LOG_INFO, PMD_LOG_DEBUG };

/* The JSON type of a field, decided by its key alone (never by its value):
 * slot, pid, exit_code and the other counts are numbers, core_dumped,
 * truncated and workers_killed booleans, every other key (incarnation and
 * a worker's text among them) a string. */
enum pmd_field_type { PMD_FIELD_STRING = 1, PMD_FIELD_NUMBER, PMD_FIELD_BOOL };
int pmd_log_field_type(const char *key);

/*
 * Formats one line (with '\n') into buf: format PMD_LOG_TEXT gives logfmt
 * "ts=... level=... event=... k=v ...", PMD_LOG_JSON one object. kv holds
 * nkv key/value pairs (2 * nkv strings; a NULL value is ""). vlen, when not
 * NULL, gives each value's length in bytes ((size_t)-1: up to its NUL), so
 * that a value may hold NUL bytes. In JSON a field has the type of its key
 * (pmd_log_field_type). Values are escaped in both formats (quoted in
 * logfmt when they need it): control characters and NUL as \u00XX, each
 * byte that is not valid UTF-8 as U+FFFD. A line that does not fit size
 * loses the end of a value or whole fields, never its closing quote, brace
 * or newline: it stays valid; a size below 6 gets an empty string, a size
 * of 0 nothing at all. Returns the length (< size, or 0 for a size of 0).
 * Pure.
 */
size_t pmd_log_formatv(char *buf, size_t size, int format, const char *ts, const char *level,
                       const char *event, const char *const *kv, const size_t *vlen, size_t nkv);

/* Sets the format and the most verbose level pmd_log writes; until then it
 * writes text at info. */
void pmd_log_setup(int format, int max_level);

/* 1 when the log is JSON: whatever else procmesh writes on stderr must be
 * a JSON line then. */
int pmd_log_json(void);

/* Writes a line, time-stamped now, to stderr if level is not above the
 * configured one; pmd_logv with value lengths as pmd_log_formatv. */
void pmd_log(int level, const char *event, const char *const *kv, size_t nkv);
void pmd_logv(int level, const char *event, const char *const *kv, const size_t *vlen, size_t nkv);

/* "SIGTERM" for SIGTERM, the number for a signal without a name; in buf. */
const char *pmd_signal_name(int sig, char *buf, size_t size);

#endif /* PMD_LOG_H */
