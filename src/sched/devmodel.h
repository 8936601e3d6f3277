/* Device and network kinds for the planner (ARCHITECTURE.md §6 "Planner", docs/PLAN.md): what one
 * accelerator (or this machine's CPU) computes and moves per second, how much it holds, what it
 * draws, and the two network tiers a job's ranks talk over (inside a node, between nodes). Filled
 * from inputs/devices.ini (plan/devices.c parses it); pure arithmetic here, no MPI, no files.
 *
 * Compute: a product of (M×K)·(K×N) takes 2MNK / (peak[precision] · eff(s)) with s = (MNK)^(1/3),
 * where eff is the device's efficiency curve: points (s_i, e_i), interpolated linearly in log s,
 * flat outside the points. Memory-bound work takes bytes / mem_bw.
 *
 * Collectives over g ranks of n bytes use the tier the group spans (docs/PLAN.md "Collectives"):
 *   ring all-reduce   2(g−1)/g · n / bw + 2(g−1) · lat
 *   tree all-reduce   2 · ceil(log2 g) · (lat + n / bw)      (the faster of the two is taken)
 *   all-gather / reduce-scatter  (g−1)/g · n / bw + (g−1) · lat
 *   point to point    lat + n / bw
 * bw is one rank's share of its tier in one direction. */
#ifndef MP_DEVMODEL_H
#define MP_DEVMODEL_H

#define DEV_NAME 64
#define DEV_EFF_POINTS 16

typedef enum { DEV_PREC_BF16, DEV_PREC_TF32, DEV_PREC_FP32, DEV_PRECS } dev_prec_t;
extern const char *const dev_prec_names[DEV_PRECS];

typedef struct {
    double bw;   /* bytes/s per rank, one direction */
    double lat;  /* seconds per message (or per collective step) */
} dev_link_t;

typedef struct {
    char name[DEV_NAME];
    double peak[DEV_PRECS];          /* FLOP/s of dense products, per precision */
    double mem_bw;                   /* bytes/s of device memory (HBM; DRAM for a CPU) */
    double mem_bytes;                /* device memory capacity */
    double idle_w, busy_w;           /* watts per device idle and at full compute */
    int neff;                        /* points of the efficiency curve */
    double eff_size[DEV_EFF_POINTS]; /* s = (M·N·K)^(1/3), increasing */
    double eff[DEV_EFF_POINTS];      /* fraction of peak reached at that size, in (0, 1] */
    int per_node;                    /* devices per node (the intra tier's reach) */
    dev_link_t intra, inter;         /* inside a node; between nodes */
    double host_bw;                  /* bytes/s device <-> host per device (offload), one direction */
    double node_cores;               /* a CPU kind: cores a node shares among its ranks (0: a GPU) */
} dev_kind_t;

/* The fraction of peak a product of size s reaches (the curve; 1 when it has no points). */
double dev_eff(const dev_kind_t *d, double s);

/* Seconds of a (M×K)·(K×N) product at precision p. */
double dev_gemm_time(const dev_kind_t *d, dev_prec_t p, double M, double N, double K);

/* Seconds of memory-bound work moving `bytes` through device memory. */
double dev_mem_time(const dev_kind_t *d, double bytes);

/* The link a group of g ranks at rank stride `stride` uses: intra when the whole group fits in one
 * node (stride·(g−1) < per_node, groups aligned to the node), else inter. */
const dev_link_t *dev_group_link(const dev_kind_t *d, int g, int stride);

double dev_allreduce_time(const dev_link_t *l, int g, double bytes);
double dev_allgather_time(const dev_link_t *l, int g, double bytes);
double dev_p2p_time(const dev_link_t *l, double bytes);

/* Checks a kind's numbers (positive peaks and bandwidths, a curve increasing in s with e in (0, 1]);
 * MP_OK, or MP_ERR with why in `why`. */
int dev_kind_check(const dev_kind_t *d, char *why, int why_len);

#endif
