/*
 * A process's namespace for driver-enforced memory limits (nvml_abi.h): the sysfs directory of
 * its memory cgroup. The fake driver charges each process's memory to it (shim/fake), and the
 * hook (shim/hook) sets a container's limit on it from the container's first pid, so both take
 * it from /proc/<pid>/cgroup by this one rule:
 *
 *   - a cgroup v1 line of the memory controller, "N:memory:/path" (or a list that names it,
 *     "N:cpu,memory:/path"), gives /sys/fs/cgroup/memory/path;
 *   - otherwise the cgroup v2 line "0::/path" gives /sys/fs/cgroup/path.
 *
 * The v1 line wins on a hybrid host, where memory is a v1 controller and "0::" names a v2 tree
 * without it. Trailing slashes are dropped ("0::/" gives /sys/fs/cgroup). The path is the one
 * the reader's cgroup namespace shows: the hook runs in the host's and sees the full path, but
 * a process in a private cgroup namespace sees its own cgroup as "/".
 */
#ifndef VSLICE_CGROUP_PATH_H
#define VSLICE_CGROUP_PATH_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define VS_CGROUP_PATH_MAX 4096

/* 1 when the comma-separated controller list names the memory controller. */
static inline int vs_cgroup_names_memory(const char *list, size_t length) {
    for (size_t start = 0; start < length;) {
        size_t end = start;
        while (end < length && list[end] != ',') end++;
        if (end - start == 6 && memcmp(list + start, "memory", 6) == 0) return 1;
        start = end + 1;
    }
    return 0;
}

/* One line "id:controllers:path" of a /proc/<pid>/cgroup file: 2 for the memory controller's
   v1 line, 1 for the v2 line, 0 for another; *path and *length: its path. */
static inline int vs_cgroup_line(const char *line, size_t length, const char **path,
                                 size_t *path_length) {
    const char *first = memchr(line, ':', length);
    if (first == NULL) return 0;
    const char *controllers = first + 1;
    const char *second = memchr(controllers, ':', length - (size_t)(controllers - line));
    if (second == NULL) return 0;
    *path = second + 1;
    *path_length = length - (size_t)(*path - line);
    if (vs_cgroup_names_memory(controllers, (size_t)(second - controllers))) return 2;
    return first == line + 1 && line[0] == '0' && second == controllers;
}

/* The namespace from the text of a /proc/<pid>/cgroup file. 0 with out filled; -1 with errno
   ENODATA (no memory or v2 line) or ENAMETOOLONG (longer than size). */
static inline int vs_cgroup_path_from(const char *text, char *out, size_t size) {
    const char *base = NULL, *path = NULL;
    size_t path_length = 0;
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t length = end != NULL ? (size_t)(end - line) : strlen(line);
        const char *p;
        size_t n;
        int kind = vs_cgroup_line(line, length, &p, &n);
        if (kind != 0) {
            base = kind == 2 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
            path = p;
            path_length = n;
        }
        if (kind == 2 || end == NULL) break; /* the v1 line wins */
        line = end + 1;
    }
    if (path == NULL || path_length == 0 || path[0] != '/') {
        errno = ENODATA;
        return -1;
    }
    while (path_length > 0 && path[path_length - 1] == '/') path_length--;
    if (strlen(base) + path_length >= size) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(out, size, "%s%.*s", base, (int)path_length, path);
    return 0;
}

/* The namespace of process pid (0: the caller). 0 with out filled; -1 with errno set (the
   file's open or read error, or vs_cgroup_path_from's). */
static inline int vs_cgroup_path(int pid, char *out, size_t size) {
    char file[64], text[16384];
    if (pid == 0)
        snprintf(file, sizeof file, "/proc/self/cgroup");
    else
        snprintf(file, sizeof file, "/proc/%d/cgroup", pid);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t got = 0;
    errno = 0;
    for (;;) {
        ssize_t n = read(fd, text + got, sizeof text - 1 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    int saved = errno;
    close(fd);
    if (got == 0) {
        errno = saved != 0 ? saved : ENODATA;
        return -1;
    }
    text[got] = '\0';
    return vs_cgroup_path_from(text, out, size);
}

#endif
