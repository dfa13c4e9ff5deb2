/* A probe for docker/scale-bench.sh: two tiny SPANK plugins built from this
 * file (-DSTOP or not) and listed around tf_cluster in plugstack.conf:
 *
 *   required /path/tfcs_start.so
 *   required /path/libtf_cluster.so
 *   required /path/tfcs_stop.so dir=/path/probe
 *
 * Plugins run in plugstack order, in the same process: start notes the time
 * in the process environment, stop takes the difference. In slurmstepd it
 * appends one line per event to dir/<host name>:
 *   init <pid> <wall ns> <cpu ns> <minor faults>   slurm_spank_init of the plugin between
 *   user <pid> <wall ns> <cpu ns> <minor faults>   slurm_spank_user_init (once per node:
 *                                      where the plugin reads the node's files)
 *   task <pid> <wall ns> <hwm kB> <ppid hwm kB> <cpu ns> <minor faults>
 *                                      task_init, in the task's process
 *                                      just before exec: its VmHWM (the
 *                                      forked slurmstepd with the plugin's
 *                                      work in it) and its parent's (the
 *                                      step's slurmstepd)
 */
#include <fcntl.h>
#include <sys/resource.h>
#include <slurm/spank.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef STOP
SPANK_PLUGIN(tfcs_stop, 1);
#else
SPANK_PLUGIN(tfcs_start, 1);
#endif

static long long clock_ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
#define now_ns() clock_ns(CLOCK_MONOTONIC)
/* CPU time of this thread: what the plugin costs, without the waits for a
 * core that a loaded machine adds to the wall time. */
#define cpu_ns() clock_ns(CLOCK_THREAD_CPUTIME_ID)

static long minflt(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

#ifndef STOP
static void mark(const char *var)
{
    char b[64];
    long long w = now_ns(), c = cpu_ns();
    snprintf(b, sizeof b, "%lld %lld %ld", w, c, minflt());
    setenv(var, b, 1);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    if (spank_context() == S_CTX_REMOTE)
        mark("TFCS_INIT_T0");
    return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    mark("TFCS_USER_T0");
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    mark("TFCS_TASK_T0");
    return 0;
}
#else
static long hwm_kb(const char *path)
{
    char line[256];
    long v = -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            v = atol(line + 6);
            break;
        }
    fclose(f);
    return v;
}

static void record(int ac, char **av, const char *var, const char *kind, int task)
{
    const char *dir = NULL, *t0 = getenv(var);
    char host[256], path[4096], line[256], ppid[64];
    long long dt, dc, w0 = 0, c0 = 0;
    long f0 = 0, df;
    int fd, n;
    for (int i = 0; i < ac; i++)
        if (!strncmp(av[i], "dir=", 4))
            dir = av[i] + 4;
    if (!dir || !t0 || gethostname(host, sizeof host))
        return;
    dc = cpu_ns();
    dt = now_ns();
    df = minflt();
    if (sscanf(t0, "%lld %lld %ld", &w0, &c0, &f0) != 3)
        return;
    df -= f0;
    dt -= w0;
    dc -= c0;
    if (task) {
        snprintf(ppid, sizeof ppid, "/proc/%d/status", (int)getppid());
        n = snprintf(line, sizeof line, "%s %d %lld %ld %ld %lld %ld\n", kind, (int)getpid(), dt,
                     hwm_kb("/proc/self/status"), hwm_kb(ppid), dc, df);
    } else {
        n = snprintf(line, sizeof line, "%s %d %lld %lld %ld\n", kind, (int)getpid(), dt, dc, df);
    }
    snprintf(path, sizeof path, "%s/%s", dir, host);
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        return;
    if (write(fd, line, n) < 0) {
    }
    close(fd);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    if (spank_context() == S_CTX_REMOTE)
        record(ac, av, "TFCS_INIT_T0", "init", 0);
    return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    record(ac, av, "TFCS_USER_T0", "user", 0);
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    record(ac, av, "TFCS_TASK_T0", "task", 1);
    return 0;
}
#endif
