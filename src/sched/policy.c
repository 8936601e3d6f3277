#include "policy.h"

const char *const policy_names[POLICY_COUNT] = {"keep", "selective", "recompute", "offload", "balance", "auto"};
const char policy_letters[POLICY_AUTO] = {'k', 's', 'r', 'o', 'b'};
