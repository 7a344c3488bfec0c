/*
 * Takes the lock of an existing region (argv[1]), scribbles over a device's total as a process
 * killed in the middle of an update would leave it, and SIGKILLs itself while holding the lock.
 * The next shim that locks must recover: reclaim, recompute the totals, carry on.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testlib.h"
#include "vslice/region_abi.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) return 2;
    vs_region *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED || !r->header.lock_ready) return 2;
    pthread_mutex_lock((pthread_mutex_t *)(void *)r->header.lock);
    r->devices[0].mem_used += 12345; /* a half-done update */
    printf("locked\n");
    fflush(stdout);
    raise(SIGKILL);
    return 0;
}
