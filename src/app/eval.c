#include "eval.h"

#include <math.h>
#include <stdio.h>

#include "check.h"
#include "run_ckpt.h"
#include "train.h"

int eval_main(const run_opts_t *opts, const char *ckpt, const char *subnet)
{
    run_t r;
    if (run_setup(&r, opts, 0) != MP_OK) return 1;
    long step = 0;
    int rc = MP_OK;
    if (r.sn.on && !subnet) rc = MP_FAIL("eval of a supernet evaluates one subnet: give --subnet (e.g. 0,2,1,0)");
    else if (!r.sn.on && subnet) rc = MP_FAIL("--subnet: the deck has no supernet (supernet.enabled=0)");
    else if (subnet && supernet_parse_subnet(&r, subnet, r.sn.sel) == MP_OK) model_select(&r.model, r.sn.sel);
    else if (subnet) rc = MP_ERR;
    rc = run_agree(rc == MP_OK ? run_ckpt_load_weights(&r, ckpt, &step) : rc);
    if (rc == MP_OK) {
        const double val = train_val_loss(&r);
        const long avail = data_val_windows(&r.data, r.deck.model.seq_len);
        const long n = r.deck.train.eval_windows < avail ? r.deck.train.eval_windows : avail;
        if (isnan(val)) rc = MP_FAIL("%s has no validation window of %d tokens", r.deck.data.path, r.deck.model.seq_len);
        else if (r.rank == 0)
            printf("val_loss %.17g | %s at step %ld | %ld windows of %d tokens of %s\n", val, ckpt, step, n,
                   r.deck.model.seq_len, r.deck.data.path);
    }
    run_teardown(&r);
    return rc == MP_OK ? 0 : 1;
}
