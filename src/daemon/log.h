/* log.h - one line per event on stderr, logfmt or JSON. */
#ifndef PM_DAEMON_LOG_H
#define PM_DAEMON_LOG_H

#include <stddef.h>

/*
 * Formats one line (with '\n') into buf: format PM__LOG_TEXT gives logfmt
 * "ts=... level=... event=... k=v ...", PM__LOG_JSON one object. kv holds
 * nkv key/value pairs (2 * nkv strings). Values made only of digits (with an
 * optional leading '-') are numbers in JSON; text values are quoted when they
 * need it (logfmt) and always escaped (JSON). Returns the length, truncated
 * to size - 1. Pure.
 */
size_t pm__log_format(char *buf, size_t size, int format, const char *ts, const char *level,
                      const char *event, const char *const *kv, size_t nkv);

/* Writes a line to stderr if level <= the configured level. ts is now. */
void pm__log(int format, int max_level, int level, const char *event, const char *const *kv,
             size_t nkv);

#endif /* PM_DAEMON_LOG_H */
