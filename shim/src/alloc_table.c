/*
 * What this process allocated: (kind, handle) -> (device, bytes), so a free releases exactly
 * what its allocation charged. Sharded so that threads allocating at once rarely meet; each
 * shard is a short spinlock (held for a few list operations) with its own free list of
 * entries, which keeps malloc off the allocation path.
 */
#include <sched.h>
#include <stdlib.h>

#include "shim.h"

enum { SHARDS = 256, SPARE = 64 };

struct entry {
    uint64_t key;
    uint64_t bytes;
    int dev;
    enum vs_kind kind;
    struct entry *next;
};

struct shard {
    int lock;
    int spare_count;
    struct entry *head;
    struct entry *spare;
} __attribute__((aligned(64)));

static struct shard shards[SHARDS];

static struct shard *shard_of(enum vs_kind kind, uint64_t key) {
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ull;
    return &shards[h >> 56];
}

static void lock(struct shard *s) {
    while (__atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&s->lock, __ATOMIC_RELAXED)) sched_yield();
}

static void unlock(struct shard *s) { __atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE); }

void vs_table_put(enum vs_kind kind, uint64_t key, int dev, uint64_t bytes) {
    struct shard *s = shard_of(kind, key);
    lock(s);
    struct entry *e = s->spare;
    if (e != NULL) { /* the common case: one short critical section, no malloc */
        s->spare = e->next;
        s->spare_count--;
        *e = (struct entry){key, bytes, dev, kind, s->head};
        s->head = e;
        unlock(s);
        return;
    }
    unlock(s);
    if ((e = malloc(sizeof *e)) == NULL)
        return; /* the free will pass through uncounted: the memory stays charged */
    lock(s);
    *e = (struct entry){key, bytes, dev, kind, s->head};
    s->head = e;
    unlock(s);
}

int vs_table_take(enum vs_kind kind, uint64_t key, int *dev, uint64_t *bytes) {
    struct shard *s = shard_of(kind, key);
    struct entry *found = NULL, *unused = NULL;
    lock(s);
    for (struct entry **p = &s->head; *p != NULL; p = &(*p)->next) {
        if ((*p)->key == key && (*p)->kind == kind) {
            found = *p;
            *p = found->next;
            break;
        }
    }
    if (found != NULL) {
        *dev = found->dev;
        *bytes = found->bytes;
        if (s->spare_count < SPARE) {
            found->next = s->spare;
            s->spare = found;
            s->spare_count++;
        } else {
            unused = found;
        }
    }
    unlock(s);
    free(unused);
    return found != NULL ? 0 : -1;
}

/* In a forked child: the parent's allocations are not the child's to free. */
void vs_table_forget_all(void) {
    for (int i = 0; i < SHARDS; i++) shards[i] = (struct shard){0};
}
