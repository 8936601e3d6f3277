/* The head on the CPU: the product and the cross-entropy it always ran, through one entry, so the
 * CUDA backend may keep its logits in bf16 between forward and backward (kernels.h). */
#include "kernels.h"

void head_forward(float *losses, float *store, const float *inp, const float *w, const int *targets, int N, int C,
                  int V)
{
    matmul_forward(store, inp, w, NULL, N, C, V);
    crossentropy_forward(losses, store, targets, N, V);
}

void head_backward(float *dinp, float *dw, float *store, const float *inp, const float *w, const int *targets,
                   float dloss, int N, int C, int V)
{
    crossentropy_backward(store, store, targets, dloss, N, V, 0);
    if (dinp || dw) matmul_backward(dinp, dw, NULL, store, inp, w, N, C, V);
}

void head_backward_weight(float *dw, const float *store, const float *inp, int N, int C, int V)
{
    if (dw) matmul_backward_weight(dw, NULL, store, inp, N, C, V);
}
