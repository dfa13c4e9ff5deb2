/*
 * A stand-in for NVIDIA's management library (libnvidia-ml.so.1), written
 * for tf-cluster's tests from NVIDIA's documented API: only the few calls
 * `tf-cluster probe-gpus` makes, each declared here from its documented
 * signature (no NVIDIA header is used). Its GPUs and their faults come from
 * the file TFC_NVML_STANDIN names (default /etc/tfc-nvml-standin), one GPU
 * a line:
 *
 *   MINOR BUSID STATE
 *
 * STATE: healthy | retired | remap | ecc | fabric (a fabric not completed)
 * | clique (a completed fabric with a zero clique id) | nofabric (a GPU
 * with no fabric: the call is not supported).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int ret_t;                 /* nvmlReturn_t */
#define OK 0                       /* NVML_SUCCESS */
#define INVALID 2                  /* NVML_ERROR_INVALID_ARGUMENT */
#define NOT_SUPPORTED 3            /* NVML_ERROR_NOT_SUPPORTED */

struct gpu {
    unsigned minor;
    char bus[32];
    char state[16];
};

static struct gpu gpus[64];
static unsigned count;

struct pci_info {                  /* nvmlPciInfo_t */
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_sub_system_id;
    char bus_id[32];
};

struct fabric_info {               /* nvmlGpuFabricInfo_t */
    unsigned char cluster_uuid[16];
    ret_t status;
    unsigned clique_id;
    unsigned char state;
};

ret_t nvmlInit_v2(void)
{
    const char *path = getenv("TFC_NVML_STANDIN");
    FILE *f = fopen(path ? path : "/etc/tfc-nvml-standin", "r");
    count = 0;
    if (!f)
        return OK;
    while (count < 64 && fscanf(f, "%u %31s %15s", &gpus[count].minor,
                                gpus[count].bus, gpus[count].state) == 3)
        count++;
    fclose(f);
    return OK;
}

ret_t nvmlShutdown(void) { return OK; }

ret_t nvmlDeviceGetCount_v2(unsigned *n)
{
    *n = count;
    return OK;
}

ret_t nvmlDeviceGetHandleByIndex_v2(unsigned i, struct gpu **dev)
{
    if (i >= count)
        return INVALID;
    *dev = &gpus[i];
    return OK;
}

ret_t nvmlDeviceGetMinorNumber(struct gpu *g, unsigned *minor)
{
    *minor = g->minor;
    return OK;
}

ret_t nvmlDeviceGetPciInfo_v3(struct gpu *g, struct pci_info *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->bus_id, sizeof p->bus_id, "%s", g->bus);
    return OK;
}

static int is(struct gpu *g, const char *s) { return strcmp(g->state, s) == 0; }

ret_t nvmlDeviceGetRetiredPagesPendingStatus(struct gpu *g, int *pending)
{
    *pending = is(g, "retired");
    return OK;
}

ret_t nvmlDeviceGetRemappedRows(struct gpu *g, unsigned *corr, unsigned *unc,
                                unsigned *pending, unsigned *failed)
{
    *corr = 0;
    *unc = 0;
    *pending = 0;
    *failed = is(g, "remap");
    return OK;
}

ret_t nvmlDeviceGetTotalEccErrors(struct gpu *g, int type, int counter,
                                  unsigned long long *n)
{
    /* Uncorrected (1), volatile (0) only. */
    *n = (type == 1 && counter == 0 && is(g, "ecc")) ? 3 : 0;
    return OK;
}

ret_t nvmlDeviceGetGpuFabricInfo(struct gpu *g, struct fabric_info *f)
{
    if (is(g, "nofabric") || is(g, "healthy") || is(g, "retired") ||
        is(g, "remap") || is(g, "ecc"))
        return NOT_SUPPORTED;
    memset(f, 0, sizeof *f);
    f->cluster_uuid[0] = 1;
    f->clique_id = is(g, "clique") ? 0 : 5;
    f->state = is(g, "fabric") ? 2 : 3; /* IN_PROGRESS, COMPLETED */
    f->status = OK;
    return OK;
}
