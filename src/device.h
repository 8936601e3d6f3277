/* train.device and train.precision: which backend runs the model (DESIGN §8). */
#ifndef MP_DEVICE_H
#define MP_DEVICE_H

/* MP_OK when this build can run the deck's device and precision (whether the node has a GPU is
 * device_count's question); otherwise a message naming the key, what is missing and what to set
 * instead, and MP_ERR. Not collective. */
int device_check(const char *device, const char *precision);
/* CUDA devices this rank sees (ranks take device node_rank mod count); 0 after a message naming
 * the host and the driver's words when there is none. */
int device_count(const char *device);

#endif
