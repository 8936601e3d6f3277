/* The cpu backend's operations by name (backend.h's lists), for its table and for emu, which runs
 * them on its region (backend_emu.c). Defined in backend_cpu.c (memory, host side, point-to-point)
 * and backend_cpu_coll.c (collectives, buckets). */
#ifndef MP_BACKEND_CPU_H
#define MP_BACKEND_CPU_H

#include "backend.h"

#define BE_CPU_DECL(ret, name, params, args) ret be_cpu_##name params;
BE_OPS(BE_CPU_DECL, BE_CPU_DECL)
#undef BE_CPU_DECL

#endif
