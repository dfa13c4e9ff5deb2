/*
 * A hostile user's srun, for the tests: preloaded into the user's own srun
 * (LD_PRELOAD), it sets the variables TFC_FORGE lists ("NAME=VALUE,...")
 * in srun's environment the moment the plugin sets its word on the step
 * (SLURM_TF_CLUSTER, `1;JOB.STEP;...`, not the early `1;srun;...`), after
 * srun decided and Slurm set its own variables for the step, and before
 * srun copies its environment to slurmstepd. So what slurmstepd receives names
 * whatever job the user likes (SLURM_JOB_ID, a heterogeneous job's
 * variables): the plugin must decide a root action's target without it.
 * Written for the tests; any user can build the same.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int (*setenv_fn)(const char *, const char *, int);

int setenv(const char *name, const char *value, int overwrite)
{
	setenv_fn real = (setenv_fn)dlsym(RTLD_NEXT, "setenv");
	int rc = real(name, value, overwrite);
	const char *forge = getenv("TFC_FORGE");
	if (rc != 0 || !forge || strcmp(name, "SLURM_TF_CLUSTER") != 0 ||
	    strncmp(value, "1;srun", 6) == 0)
		return rc;
	char list[4096];
	strncpy(list, forge, sizeof(list) - 1);
	list[sizeof(list) - 1] = '\0';
	char *save = NULL;
	for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		if (!eq)
			continue;
		*eq = '\0';
		real(item, eq + 1, 1);
	}
	return rc;
}
