// Host-side check of the lane maps in kernels/mma_frag.h, which the FA2 attention kernels use for
// every ldmatrix address and every mma fragment (no GPU needed):
//   g++ -std=c++17 -Wall -Wextra -Werror -Ikernels validation/cuda/fa2_layout_test.cc -o /tmp/fa2_layout && /tmp/fa2_layout
// (`make check` builds and runs it too, in every build: it needs no CUDA; TAP output.)
// It emulates one warp's ldmatrix (.x4, with and without .trans) and mma.sync m16n8k16 as the PTX
// ISA defines their per-lane layouts (written out here from the ISA's tables, independently of
// mma_frag.h), then runs the kernels' four product patterns through the header's maps and compares
// them with plain loops:
//   S = Q Kᵀ  (A: Q rows, B: K rows without transpose)       forward, dQ's S, dK/dV's Sᵀ = K Qᵀ
//   O = P V   (A: the C fragments of S reused, B: V rows .trans) forward, dV += Pᵀ dO, dK, dQ
// Small integers stand in for bf16 values, so every product is exact and equality is the test.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mma_frag.h"

namespace {

// A lane's registers: up to 4 of two 16-bit halves, as floats.
struct regs {
    float v[4][2];
};

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane 8j + i gives the address of row i of
// matrix j; without .trans lane l receives, in register j, matrix j's row l/4, columns 2(l%4) and
// 2(l%4)+1; with .trans it receives column l/4, rows 2(l%4) and 2(l%4)+1.
void ldmatrix_x4(regs out[32], const std::vector<float> &tile, int ld, const int row[32], const int col[32], bool trans)
{
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) {
                int r, c;
                if (!trans) r = l / 4, c = 2 * (l % 4) + h;
                else r = 2 * (l % 4) + h, c = l / 4;
                const int src = 8 * j + r; // the lane whose address names this row
                out[l].v[j][h] = tile[(size_t)row[src] * ld + col[src] + c];
            }
}

// The ISA's fragment tables for .bf16 m16n8k16, element by element (a0..a7, b0..b3, c0..c3).
int isa_a_row(int lane, int i) { return lane / 4 + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0); }
int isa_a_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
int isa_b_row(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
int isa_b_col(int lane) { return lane / 4; }
int isa_c_row(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
int isa_c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

// D = A B + C for one warp: reassemble A (16x16) and B (16x8) from the lanes' registers, multiply,
// scatter back into C's layout.
void mma_m16n8k16(float c[32][4], const regs a[32], const regs b[32], int b_first)
{
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 8; i++) A[isa_a_row(l, i)][isa_a_col(l, i)] = a[l].v[i / 2][i % 2];
        for (int i = 0; i < 4; i++) B[isa_b_row(l, i)][isa_b_col(l)] = b[l].v[b_first + i / 2][i % 2];
    }
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            float s = 0;
            for (int k = 0; k < 16; k++) s += A[isa_c_row(l, i)][k] * B[k][isa_c_col(l, i)];
            c[l][i] += s;
        }
}

int failures = 0;

void expect(bool ok, const char *what, int a, int b, int c)
{
    if (!ok && failures++ < 10) std::printf("# FAIL %s (%d, %d, %d)\n", what, a, b, c);
}

// The header's own maps agree with the ISA tables (the kernels' epilogues and masks use them).
void check_maps()
{
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 8; i++) {
            expect(frag_a_row(l, i / 2) == isa_a_row(l, i), "frag_a_row", l, i, 0);
            expect(frag_a_col(l, i / 2, i % 2) == isa_a_col(l, i), "frag_a_col", l, i, 0);
        }
        for (int i = 0; i < 4; i++) {
            expect(frag_b_row(l, i / 2, i % 2) == isa_b_row(l, i), "frag_b_row", l, i, 0);
            expect(frag_b_col(l) == isa_b_col(l), "frag_b_col", l, i, 0);
            expect(frag_c_row(l, i) == isa_c_row(l, i), "frag_c_row", l, i, 0);
            expect(frag_c_col(l, i) == isa_c_col(l, i), "frag_c_col", l, i, 0);
        }
    }
}

// One warp, 16 query rows, D channels, a tile of N keys: S = Q Kᵀ then O = P V with P = S's own
// fragments (rounded in the kernel; exact here), through the same loops as the kernels.
void check_products(int D, int N)
{
    const int LD = D + 8; // the kernels' padded row
    std::vector<float> Q(16 * LD), K((size_t)N * LD), V((size_t)N * LD);
    for (auto &x : Q) x = (float)(std::rand() % 7 - 3);
    for (auto &x : K) x = (float)(std::rand() % 7 - 3);
    for (auto &x : V) x = (float)(std::rand() % 5 - 2);

    int row[32], col[32];
    std::vector<regs> qf((size_t)(D / 16) * 32);
    for (int kk = 0; kk < D / 16; kk++) {
        for (int l = 0; l < 32; l++) row[l] = ldsm_a_row(l), col[l] = kk * 16 + ldsm_a_col(l);
        ldmatrix_x4(&qf[(size_t)kk * 32], Q, LD, row, col, false);
    }
    std::vector<float> s((size_t)(N / 8) * 32 * 4, 0.0f); // s[n-tile][lane][e]
    auto S = [&](int n, int l) { return (float(*)[4]) & s[((size_t)n * 32 + l) * 4]; };
    for (int kk = 0; kk < D / 16; kk++)
        for (int np = 0; np < N / 16; np++) {
            regs bb[32];
            for (int l = 0; l < 32; l++) row[l] = np * 16 + ldsm_bn_row(l), col[l] = kk * 16 + ldsm_bn_col(l);
            ldmatrix_x4(bb, K, LD, row, col, false);
            float c0[32][4], c1[32][4];
            for (int l = 0; l < 32; l++)
                for (int e = 0; e < 4; e++) c0[l][e] = (*S(2 * np, l))[e], c1[l][e] = (*S(2 * np + 1, l))[e];
            mma_m16n8k16(c0, &qf[(size_t)kk * 32], bb, 0);
            mma_m16n8k16(c1, &qf[(size_t)kk * 32], bb, 2);
            for (int l = 0; l < 32; l++)
                for (int e = 0; e < 4; e++) (*S(2 * np, l))[e] = c0[l][e], (*S(2 * np + 1, l))[e] = c1[l][e];
        }
    std::vector<float> ref((size_t)16 * N);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < N; j++) {
            float x = 0;
            for (int d = 0; d < D; d++) x += Q[(size_t)i * LD + d] * K[(size_t)j * LD + d];
            ref[(size_t)i * N + j] = x;
        }
    for (int n = 0; n < N / 8; n++)
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 4; e++) {
                const int i = frag_c_row(l, e), j = 8 * n + frag_c_col(l, e);
                expect((*S(n, l))[e] == ref[(size_t)i * N + j], "S = Q K^T", D, i, j);
            }

    // O = S V: S's C fragments as A, V through ldmatrix .trans
    std::vector<float> o((size_t)(D / 8) * 32 * 4, 0.0f);
    for (int kk = 0; kk < N / 16; kk++) {
        regs pa[32];
        for (int l = 0; l < 32; l++)
            for (int r = 0; r < 4; r++)
                for (int h = 0; h < 2; h++) pa[l].v[r][h] = (*S(2 * kk + c_to_a_tile(r), l))[c_to_a_elem(r) + h];
        for (int dp = 0; dp < D / 16; dp++) {
            regs bb[32];
            for (int l = 0; l < 32; l++) row[l] = kk * 16 + ldsm_bk_row(l), col[l] = dp * 16 + ldsm_bk_col(l);
            ldmatrix_x4(bb, V, LD, row, col, true);
            for (int half = 0; half < 2; half++) {
                float c[32][4];
                const int n = 2 * dp + half;
                for (int l = 0; l < 32; l++)
                    for (int e = 0; e < 4; e++) c[l][e] = o[((size_t)n * 32 + l) * 4 + e];
                mma_m16n8k16(c, pa, bb, 2 * half);
                for (int l = 0; l < 32; l++)
                    for (int e = 0; e < 4; e++) o[((size_t)n * 32 + l) * 4 + e] = c[l][e];
            }
        }
    }
    for (int n = 0; n < D / 8; n++)
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 4; e++) {
                const int i = frag_c_row(l, e), d = 8 * n + frag_c_col(l, e);
                float x = 0;
                for (int j = 0; j < N; j++) x += ref[(size_t)i * N + j] * V[(size_t)j * LD + d];
                expect(o[((size_t)n * 32 + l) * 4 + e] == x, "O = S V", D, i, d);
            }
}

} // namespace

int main()
{
    std::printf("1..2\n");
    check_maps();
    std::printf("%sok 1 - mma_frag.h's fragment maps match the ISA's m16n8k16 tables\n", failures ? "not " : "");
    const int before = failures;
    for (int D : {16, 32, 64, 128}) check_products(D, 64);
    check_products(64, 32);
    std::printf("%sok 2 - S = Q K^T and O = P V through ldmatrix and mma emulation, D = 16..128\n",
                failures > before ? "not " : "");
    return failures ? 1 : 0;
}
