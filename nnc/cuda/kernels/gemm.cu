// GEMM: out[b] = op(a)[b] @ op(w)[b] + bias (nnc/cmd/gemm/), a 32x32-tiled kernel.
// Layouts are passed as element strides, so transposes, shared 2-D operands (batch stride 0)
// and strided outputs need no copies:
//   op(a)[b][m][k] = a[b*a_bs + m*a_ms + k*a_ks]     op(w)[b][k][n] = w[b*w_bs + k*w_ks + n*w_ns]
//   out[b][m][n]   = out[b*o_bs + m*o_ms + n]         (unit stride along n)
// Grid: (ceil(N/32), ceil(M/32), B); block: 32x8 threads, each computing 4 outputs of a column.
// Accumulates in nnc_acc_t<T> (float for float16, like cuBLAS's half GEMM with float compute),
// like a float32 BLAS (docs/commands.md states the tolerance).

#define NNC_TILE 32
#define NNC_ROWS 8

struct nnc_gemm_t {
    long long m, n, k;
    long long a_bs, a_ms, a_ks;
    long long w_bs, w_ks, w_ns;
    long long o_bs, o_ms;
};

template <typename T>
__device__ void gemm_tiled(nnc_gemm_t g, const T* a, const T* w, const T* bias, T* out) {
    typedef nnc_acc_t<T> A;
    __shared__ A as[NNC_TILE][NNC_TILE + 1];   // +1: no bank conflicts on column reads
    __shared__ A ws[NNC_TILE][NNC_TILE + 1];
    const long long b = blockIdx.z;
    const long long m0 = (long long)blockIdx.y * NNC_TILE, n0 = (long long)blockIdx.x * NNC_TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    A acc[NNC_TILE / NNC_ROWS];
    for (int r = 0; r < NNC_TILE / NNC_ROWS; r++) acc[r] = (A)0;
    a += b * g.a_bs;
    w += b * g.w_bs;
    for (long long k0 = 0; k0 < g.k; k0 += NNC_TILE) {
        for (int r = ty; r < NNC_TILE; r += NNC_ROWS) {
            long long m = m0 + r, k = k0 + tx;
            as[r][tx] = (m < g.m && k < g.k) ? nnc_ld(a[m * g.a_ms + k * g.a_ks]) : (A)0;
            long long kk = k0 + r, n = n0 + tx;
            ws[r][tx] = (kk < g.k && n < g.n) ? nnc_ld(w[kk * g.w_ks + n * g.w_ns]) : (A)0;
        }
        __syncthreads();
        for (int kk = 0; kk < NNC_TILE; kk++) {
            A wv = ws[kk][tx];
            for (int r = 0; r < NNC_TILE / NNC_ROWS; r++) acc[r] += as[ty + r * NNC_ROWS][kk] * wv;
        }
        __syncthreads();
    }
    const long long n = n0 + tx;
    if (n >= g.n) return;
    for (int r = 0; r < NNC_TILE / NNC_ROWS; r++) {
        long long m = m0 + ty + r * NNC_ROWS;
        if (m < g.m)
            out[b * g.o_bs + m * g.o_ms + n] = nnc_st<T>(acc[r] + (bias ? nnc_ld(bias[n]) : (A)0));
    }
}

extern "C" __global__ void nnc_gemm_f16(nnc_gemm_t g, const nnc_half* a, const nnc_half* w,
                                        const nnc_half* bias, nnc_half* out) {
    gemm_tiled<nnc_half>(g, a, w, bias, out); }
extern "C" __global__ void nnc_gemm_f32(nnc_gemm_t g, const float* a, const float* w,
                                        const float* bias, float* out) {
    gemm_tiled<float>(g, a, w, bias, out); }
extern "C" __global__ void nnc_gemm_f64(nnc_gemm_t g, const double* a, const double* w,
                                        const double* bias, double* out) {
    gemm_tiled<double>(g, a, w, bias, out); }
