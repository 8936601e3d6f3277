// A host stand-in for the CUDA dialect of the plain kernels (no tensor cores, no PTX): a test
// includes this, then a kernels/..._cuda.cu under its emulation macro, and runs the kernels on CPU
// threads with emu_launch, one std::thread per CUDA thread, blocks one after another. Warp
// shuffles and __syncthreads meet at barriers; a thread that returns drops out of them, as an
// exited thread does on the GPU. Static __shared__ arrays are static locals: one block runs at a
// time. This checks indexing, masking, the reductions' order and the launch shapes, not timing or
// memory ordering. (fa2_emu_test.cc has its own, larger stand-in with the PTX wrappers.)
#ifndef MP_EMU_DIALECT_H
#define MP_EMU_DIALECT_H

#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
static thread_local dim3 threadIdx;
static dim3 blockIdx, blockDim, gridDim;

enum { EMU_MAX_WARPS = 32 };
struct emu_warp {
    std::unique_ptr<std::barrier<>> bar;
    float f[32];
};
static emu_warp emu_warps[EMU_MAX_WARPS];
static std::unique_ptr<std::barrier<>> emu_block_bar;

inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int off)
{
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    emu_warps[w].f[l] = v;
    emu_warps[w].bar->arrive_and_wait();
    const float r = emu_warps[w].f[l ^ off];
    emu_warps[w].bar->arrive_and_wait();
    return r;
}

// kernel<<<grid, block>>>(...) as emu_launch(grid, block, [&] { kernel(...); }); blockDim.x a
// multiple of 32 (whole warps), y = z = 1.
inline void emu_launch(dim3 grid, dim3 block, const std::function<void()> &body)
{
    if (block.x % 32 || block.x / 32 > EMU_MAX_WARPS || block.y != 1 || block.z != 1) {
        std::fprintf(stderr, "emu_launch: block (%u, %u, %u) is not whole warps in x\n", block.x, block.y, block.z);
        std::exit(2);
    }
    gridDim = grid, blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                emu_block_bar = std::make_unique<std::barrier<>>(block.x);
                for (unsigned w = 0; w < block.x / 32; w++) emu_warps[w].bar = std::make_unique<std::barrier<>>(32);
                std::vector<std::thread> th;
                for (unsigned t = 0; t < block.x; t++)
                    th.emplace_back([t, &body] {
                        threadIdx = dim3(t);
                        body();
                        emu_warps[t / 32].bar->arrive_and_drop();
                        emu_block_bar->arrive_and_drop();
                    });
                for (auto &t : th) t.join();
            }
}

// ||got − ref|| / ||ref|| in double (the selftest's measure), and the count of NaNs in got (an
// output poisoned with NaN and never written).
inline double emu_rel(const float *got, const float *ref, size_t n, size_t *nan)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (std::isnan(got[i])) {
            ++*nan;
            continue;
        }
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

#endif
