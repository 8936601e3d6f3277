#include "eval.h"

#include <math.h>
#include <stdio.h>

#include "check.h"
#include "run_ckpt.h"
#include "train.h"

int eval_main(const run_opts_t *opts, const struct train_ops *ops_offered, const char *ckpt, const char *subnet)
{
    run_t r;
    if (run_setup(&r, opts, 0) != MP_OK) return 1;
    const train_ops_t *ops = r.plug ? ops_offered : NULL;
    long step = 0;
    int rc = MP_OK;
    if (ops && ops->select) rc = ops->select(&r, subnet); /* a supernet: the subnet to evaluate */
    else if (subnet) rc = MP_FAIL("--subnet: the deck has no supernet (supernet.enabled=0)");
    rc = run_agree(rc == MP_OK ? run_ckpt_load_weights(&r, ckpt, &step) : rc);
    if (rc == MP_OK) {
        const double val = train_val_loss(&r);
        const long avail = data_val_windows(&r.data, r.deck.model.seq_len);
        const long n = r.deck.train.eval_windows < avail ? r.deck.train.eval_windows : avail;
        if (isnan(val) && r.data.val_missing)
            rc = MP_FAIL("%s: .bin shards carry no validation split: set data.val_path to a glob of validation shards",
                         r.deck.data.path);
        else if (isnan(val)) rc = MP_FAIL("%s has no validation window of %d tokens", r.deck.data.path, r.deck.model.seq_len);
        else if (r.lay.rank == 0)
            printf("val_loss %.17g | %s at step %ld | %ld windows of %d tokens of %s\n", val, ckpt, step, n,
                   r.deck.model.seq_len, r.deck.data.path);
    }
    run_teardown(&r);
    return rc == MP_OK ? 0 : 1;
}
