/*
 * A stand-in for a container SPANK plugin such as NVIDIA's pyxis, written for
 * tf-cluster's tests from the documented facts of what pyxis and enroot do
 * (docs/containers.md). It is not pyxis and shares no code with it; it exists
 * so that the container tests run on what the project may build and ship.
 *
 * Listed before tf-cluster in plugstack.conf, it does in the SPANK task_init
 * hook of each task (as the user, in the task, after slurmstepd set the
 * task's environment) what pyxis does there:
 *
 *  1. It imports the image's environment (IMAGE/etc/environment, NAME=VALUE
 *     lines, as enroot keeps a Docker image's ENV) over the task's, with
 *     overwrite. A name it replaces keeps Slurm's value in
 *     STANDIN_WAS_<NAME>, so that a test can still read the task's real
 *     SLURM_PROCID (a real image gives no such way back).
 *  2. It enters new user and mount namespaces and the image's root, as enroot
 *     does: the host's /proc and /sys read-only, /dev and /home bound, a fresh
 *     tmpfs on /tmp, and each --container-mounts=SRC:DST[,SRC:DST...] bound
 *     over DST, under the image's /proc and /sys too. So /tmp and any path
 *     the user covers are the container's, not the host's: the tests cover
 *     /sys/class and /proc/driver with decoys listing GPUs the node lacks
 *     (a node without the NVIDIA driver has no /proc/driver/nvidia to cover,
 *     but procfs itself makes /proc/driver, fs/proc/root.c, and a bind over
 *     it is allowed in the new user and mount namespaces).
 *
 *  3. Asked to (--container-unshare=net, the name and form pyxis 0.24
 *     documents, or STANDIN_UNSHARE_NET=1 in the step's environment, as a
 *     plugin that names it otherwise would), it enters a new network
 *     namespace too, inside the new user namespace (CLONE_NEWNET): the task
 *     then holds a loopback interface only, none of the node's.
 *
 * Options (srun, sbatch, salloc): --container-image=DIR (a root directory,
 * the tests' images are made by docker/node/images/make.sh),
 * --container-mounts and --container-unshare=net (a comma list; any other
 * namespace fails the task). A step without --container-image is left alone.
 * Built by docker/matrix.sh against each Slurm's headers; never shipped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(container_standin, 1);

/* One variable holds at most this many bytes (Linux's MAX_ARG_STRLEN). */
#define VALUE_MAX 131072

static char *image;
static char *mounts;
static char *unshare_list;

static int set_string(char **where, const char *arg)
{
	free(*where);
	*where = arg ? strdup(arg) : NULL;
	return (arg && !*where) ? -1 : 0;
}

static int opt_image(int val, const char *arg, int remote)
{
	(void) val;
	(void) remote;
	return set_string(&image, arg);
}

static int opt_mounts(int val, const char *arg, int remote)
{
	(void) val;
	(void) remote;
	return set_string(&mounts, arg);
}

static int opt_unshare(int val, const char *arg, int remote)
{
	(void) val;
	(void) remote;
	return set_string(&unshare_list, arg);
}

struct spank_option spank_options[] = {
	{ "container-image", "DIR",
	  "[test stand-in of a container plugin] run each task in the root directory DIR",
	  1, 0, opt_image },
	{ "container-mounts", "SRC:DST[,SRC:DST...]",
	  "[test stand-in of a container plugin] bind SRC over DST in the container",
	  1, 0, opt_mounts },
	{ "container-unshare", "net",
	  "[test stand-in of a container plugin] give each task a network namespace of its own",
	  1, 0, opt_unshare },
	SPANK_OPTIONS_TABLE_END
};

/* Imports IMAGE/etc/environment over the task's environment, with overwrite. */
static int import_environment(spank_t sp)
{
	char path[PATH_MAX], line[VALUE_MAX + 256], name[512];
	char *old = malloc(VALUE_MAX + 1);
	FILE *f;
	int rc = 0;

	if (!old)
		return -1;
	snprintf(path, sizeof(path), "%s/etc/environment", image);
	f = fopen(path, "r");
	if (!f) {
		free(old);
		return errno == ENOENT ? 0 : -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *eq, *end = line + strlen(line);

		while (end > line && (end[-1] == '\n' || end[-1] == '\r'))
			*--end = '\0';
		if (line[0] == '\0' || line[0] == '#' || !(eq = strchr(line, '=')))
			continue;
		*eq = '\0';
		if (spank_getenv(sp, line, old, VALUE_MAX + 1) == ESPANK_SUCCESS &&
		    strcmp(old, eq + 1) != 0) {
			snprintf(name, sizeof(name), "STANDIN_WAS_%s", line);
			if (spank_setenv(sp, name, old, 1) != ESPANK_SUCCESS)
				rc = -1;
		}
		if (spank_setenv(sp, line, eq + 1, 1) != ESPANK_SUCCESS)
			rc = -1;
	}
	fclose(f);
	free(old);
	return rc;
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t) strlen(text) ? 0 : -1;
}

/* Binds SRC (host path) over DST (path in the container); read-only if asked. */
static int bind_path(const char *src, const char *dst, int read_only)
{
	char target[PATH_MAX];

	snprintf(target, sizeof(target), "%s%s", image, dst);
	if (mount(src, target, NULL, MS_BIND | MS_REC, NULL) < 0) {
		slurm_error("container-standin: cannot bind %s over %s: %m", src, dst);
		return -1;
	}
	/* Best effort, as on an unprivileged host a locked flag may refuse it. */
	if (read_only)
		(void) mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL);
	return 0;
}

/* Whether the task gets a network namespace of its own: -1 on a bad list. */
static int unshare_net(spank_t sp)
{
	char flag[8];
	char *list, *save = NULL, *item;
	int net = 0;

	if (spank_getenv(sp, "STANDIN_UNSHARE_NET", flag, sizeof(flag)) == ESPANK_SUCCESS &&
	    strcmp(flag, "1") == 0)
		net = 1;
	if (!unshare_list)
		return net;
	if (!(list = strdup(unshare_list)))
		return -1;
	for (item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		if (strcmp(item, "net") != 0) {
			slurm_error("container-standin: unknown namespace '%s' (want net)", item);
			free(list);
			return -1;
		}
		net = 1;
	}
	free(list);
	return net;
}

/* Enters new user and mount namespaces (and network, `net`) and the image's root. */
static int enter_container(int net)
{
	char map[64], cwd[PATH_MAX], target[PATH_MAX];
	uid_t uid = getuid();
	gid_t gid = getgid();

	if (!getcwd(cwd, sizeof(cwd)))
		strcpy(cwd, "/");
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS | (net ? CLONE_NEWNET : 0)) < 0) {
		slurm_error("container-standin: unshare: %m");
		return -1;
	}
	/* slurmstepd dropped root for the job's user: the task is then not
	 * dumpable and its /proc/self files are root's; as enroot's own
	 * process would be, it is made dumpable to write its id maps. */
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0) {
		slurm_error("container-standin: prctl: %m");
		return -1;
	}
	snprintf(map, sizeof(map), "%u %u 1", (unsigned) uid, (unsigned) uid);
	if (write_file("/proc/self/uid_map", map) < 0 ||
	    write_file("/proc/self/setgroups", "deny") < 0) {
		slurm_error("container-standin: uid_map: %m");
		return -1;
	}
	snprintf(map, sizeof(map), "%u %u 1", (unsigned) gid, (unsigned) gid);
	if (write_file("/proc/self/gid_map", map) < 0) {
		slurm_error("container-standin: gid_map: %m");
		return -1;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(image, image, NULL, MS_BIND | MS_REC, NULL) < 0) {
		slurm_error("container-standin: cannot mount the image %s: %m", image);
		return -1;
	}
	if (bind_path("/proc", "/proc", 1) < 0 || bind_path("/sys", "/sys", 1) < 0 ||
	    bind_path("/dev", "/dev", 0) < 0 || bind_path("/home", "/home", 0) < 0)
		return -1;
	snprintf(target, sizeof(target), "%s/tmp", image);
	if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0) {
		slurm_error("container-standin: tmpfs on /tmp: %m");
		return -1;
	}
	if (mounts) {
		char *list = strdup(mounts), *save = NULL, *item;

		if (!list)
			return -1;
		for (item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
			char *colon = strchr(item, ':');

			if (!colon || colon == item || colon[1] != '/') {
				slurm_error("container-standin: bad mount '%s' (want SRC:DST)", item);
				free(list);
				return -1;
			}
			*colon = '\0';
			if (bind_path(item, colon + 1, 0) < 0) {
				free(list);
				return -1;
			}
		}
		free(list);
	}
	if (chroot(image) < 0) {
		slurm_error("container-standin: chroot %s: %m", image);
		return -1;
	}
	if (chdir(cwd) < 0 && chdir("/") < 0)
		return -1;
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	int net;

	(void) ac;
	(void) av;
	if (!image)
		return 0;
	if ((net = unshare_net(sp)) < 0)
		return -1;
	if (import_environment(sp) < 0) {
		slurm_error("container-standin: cannot import %s/etc/environment", image);
		return -1;
	}
	return enter_container(net);
}
