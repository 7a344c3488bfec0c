/* One-line messages on stderr, every one prefixed "[vslice]"; level from VSLICE_LOG_LEVEL. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "shim.h"

int vs_log_level = VS_WARN;

static const char *const level_names[] = {"", "error", "warning", "info", "debug"};

/* Read once when the library is loaded, before any hook can run. */
__attribute__((constructor)) static void vs_log_init(void) {
    const char *text = getenv("VSLICE_LOG_LEVEL");
    if (text == NULL || *text == '\0') return;
    if (strcmp(text, "0") == 0 || strcasecmp(text, "off") == 0 || strcasecmp(text, "none") == 0) {
        vs_log_level = 0;
        return;
    }
    for (int level = VS_ERROR; level <= VS_DEBUG; level++) {
        char digit[2] = {(char)('0' + level), '\0'};
        if (strcasecmp(text, level_names[level]) == 0 || strcmp(text, digit) == 0 ||
            (level == VS_WARN && strcasecmp(text, "warn") == 0)) {
            vs_log_level = level;
            return;
        }
    }
    fprintf(stderr, "[vslice] warning: VSLICE_LOG_LEVEL='%s' is not one of "
                    "off, error, warn, info, debug (or 0-4); using warn\n", text);
}

void vs_log(enum vs_level level, const char *fmt, ...) {
    char line[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    /* one write per message so lines of concurrent processes do not interleave */
    fprintf(stderr, "[vslice] %s: %s\n", level_names[level], line);
}
