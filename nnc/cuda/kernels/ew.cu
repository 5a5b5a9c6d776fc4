// Element-wise commands on contiguous tensors of n elements (nnc/ops/ew.py, basic.py).
// EWSUM / EWPROD take up to NNC_EW_MAX_INPUTS inputs in one launch (more: chained launches
// accumulating into the output, which backends.py arranges).

#define NNC_EW_MAX_INPUTS 8

struct nnc_ptrs { const void* p[NNC_EW_MAX_INPUTS]; };

template <typename T, bool PROD>
__device__ void ew_reduce(nnc_ptrs in, int count, T* y, long long n) {
    NNC_GRID_STRIDE(i, n) {
        T acc = ((const T*)in.p[0])[i];
        for (int k = 1; k < count; k++) {
            T v = ((const T*)in.p[k])[i];
            acc = PROD ? acc * v : acc + v;
        }
        y[i] = acc;
    }
}

template <typename T>
__device__ void ew_div(const T* a, const T* b, T* y, long long n) {
    // a == NULL: NNC's 1 / b.
    NNC_GRID_STRIDE(i, n) { y[i] = (a ? a[i] : (T)1) / b[i]; }
}

template <typename T>
__device__ void ew_exp(const T* x, T* y, long long n) { NNC_GRID_STRIDE(i, n) { y[i] = exp(x[i]); } }

template <typename T>
__device__ void ew_log(const T* x, T* y, long long n) { NNC_GRID_STRIDE(i, n) { y[i] = log(x[i]); } }

template <typename T>
__device__ void ew_relu(const T* x, T* y, long long n) {
    // x > 0 ? x : 0 would turn NaN into 0; NNC (and CPU_REF's np.maximum) keep NaN.
    NNC_GRID_STRIDE(i, n) { T v = x[i]; y[i] = (v < (T)0) ? (T)0 : v; }
}

template <typename T>
__device__ void scalar_mul(T a, const T* x, T* y, long long n) {
    NNC_GRID_STRIDE(i, n) { y[i] = a * x[i]; }
}

template <typename T>
__device__ void set_value(T value, T* y, long long n) { NNC_GRID_STRIDE(i, n) { y[i] = value; } }

#define NNC_EW(T, S)                                                                        \
extern "C" __global__ void nnc_ewsum_##S(nnc_ptrs in, int count, T* y, long long n) {      \
    ew_reduce<T, false>(in, count, y, n); }                                                 \
extern "C" __global__ void nnc_ewprod_##S(nnc_ptrs in, int count, T* y, long long n) {     \
    ew_reduce<T, true>(in, count, y, n); }                                                  \
extern "C" __global__ void nnc_ewdiv_##S(const T* a, const T* b, T* y, long long n) {      \
    ew_div<T>(a, b, y, n); }                                                                \
extern "C" __global__ void nnc_ewexp_##S(const T* x, T* y, long long n) { ew_exp<T>(x, y, n); } \
extern "C" __global__ void nnc_ewlog_##S(const T* x, T* y, long long n) { ew_log<T>(x, y, n); } \
extern "C" __global__ void nnc_relu_##S(const T* x, T* y, long long n) { ew_relu<T>(x, y, n); } \
extern "C" __global__ void nnc_scalar_mul_##S(T a, const T* x, T* y, long long n) {        \
    scalar_mul<T>(a, x, y, n); }                                                            \
extern "C" __global__ void nnc_set_##S(T value, T* y, long long n) { set_value<T>(value, y, n); }

NNC_EW(float, f32)
NNC_EW(double, f64)
