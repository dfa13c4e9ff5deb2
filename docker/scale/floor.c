/* Slurm's own floor for task_init, built and loaded by docker/scale-bench.sh
 * only (never packaged): a SPANK plugin that computes nothing and, in each
 * task's task_init, calls spank_setenv for exactly the variables tf-cluster
 * set for that task in a captured step of the same shape.
 *
 *   required /path/tfcs_floor.so dir=/path/floor
 *
 * dir/<global rank> holds that task's variables as NAME=VALUE\0 records. The
 * files of the node's own tasks (block distribution: ranks node id * tasks per
 * node ...) are read once per node in user_init, in slurmstepd before the
 * tasks are forked, as tf-cluster makes its node's share there: the read is
 * not in task_init's time, the same as tf-cluster's per-node work. */
#include <slurm/spank.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SPANK_PLUGIN(tfcs_floor, 1);

static char dir[4096];
static unsigned first_rank, count;
static char **vars;   /* vars[i]: task first_rank + i's records */
static size_t *sizes;

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    size_t cap = 0, n = 0, r;
    if (!f)
        return NULL;
    do {
        if (n == cap && !(b = realloc(b, cap = cap ? 2 * cap : 65536)))
            break;
        r = fread(b + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    *len = n;
    return b;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    for (int i = 0; i < ac; i++)
        if (!strncmp(av[i], "dir=", 4))
            snprintf(dir, sizeof dir, "%s", av[i] + 4);
    return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    uint32_t node = 0, local = 0;
    char path[4200];
    if (!dir[0] || spank_get_item(sp, S_JOB_NODEID, &node) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local) != ESPANK_SUCCESS)
        return 0;
    first_rank = node * local;
    count = local;
    vars = calloc(count, sizeof *vars);
    sizes = calloc(count, sizeof *sizes);
    for (unsigned i = 0; vars && sizes && i < count; i++) {
        snprintf(path, sizeof path, "%s/%u", dir, first_rank + i);
        vars[i] = slurp(path, &sizes[i]);
        /* NAME=VALUE\0 becomes NAME\0VALUE\0 here, once, so that task_init
         * writes nothing of its own in the forked task. */
        for (char *q = vars[i], *e = q + (q ? sizes[i] : 0); q && q < e; q += strnlen(q, e - q) + 1) {
            char *eq = memchr(q, '=', strnlen(q, e - q));
            if (eq)
                *eq = 0;
        }
    }
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    uint32_t rank = 0;
    if (!vars || spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) != ESPANK_SUCCESS ||
        rank < first_rank || rank - first_rank >= count || !vars[rank - first_rank])
        return 0;
    char *p = vars[rank - first_rank], *end = p + sizes[rank - first_rank];
    while (p < end) {
        char *value = p + strnlen(p, end - p) + 1;
        if (value >= end)
            break;
        if (spank_setenv(sp, p, value, 1) != ESPANK_SUCCESS)
            return -1;
        p = value + strnlen(value, end - value) + 1;
    }
    return 0;
}
