// Element-wise commands on contiguous tensors of n elements (nnc/cmd/elementwise/, nnc/cmd/basic/).
// EWSUM / EWPROD take up to NNC_EW_MAX_INPUTS inputs in one launch (more: chained launches
// accumulating into the output, which nnc/cmd/elementwise/gpu/ref.py arranges). Arithmetic is
// in nnc_acc_t<T> (float for float16); SCALAR_MUL's factor and SET's value come in that type.

#define NNC_EW_MAX_INPUTS 8

struct nnc_ptrs { const void* p[NNC_EW_MAX_INPUTS]; };

template <typename T, bool PROD>
__device__ void ew_reduce(nnc_ptrs in, int count, T* y, long long n) {
    NNC_GRID_STRIDE(i, n) {
        nnc_acc_t<T> acc = nnc_ld(((const T*)in.p[0])[i]);
        for (int k = 1; k < count; k++) {
            nnc_acc_t<T> v = nnc_ld(((const T*)in.p[k])[i]);
            acc = PROD ? acc * v : acc + v;
        }
        y[i] = nnc_st<T>(acc);
    }
}

template <typename T>
__device__ void ew_div(const T* a, const T* b, T* y, long long n) {
    // a == NULL: NNC's 1 / b.
    typedef nnc_acc_t<T> A;
    NNC_GRID_STRIDE(i, n) { y[i] = nnc_st<T>((a ? nnc_ld(a[i]) : (A)1) / nnc_ld(b[i])); }
}

// Unary kernels, SCALAR_MUL and SET see their tensors as rows x cols: element i is at
// (i / cols) * stride + i % cols, so a channel slice of an NHWC buffer (evenly spaced rows of
// unit-stride channels, e.g. Inception's in-place RELU on a concat view) needs no copy. A
// contiguous tensor is 1 row. x and y may be the same memory (in place).
#define NNC_ROWS_AT(p, s, i, cols) (p)[((i) / (cols)) * (s) + (i) % (cols)]

template <typename T>
__device__ void ew_exp(const T* x, long long xs, T* y, long long ys, long long n, long long cols) {
    NNC_GRID_STRIDE(i, n) {
        NNC_ROWS_AT(y, ys, i, cols) = nnc_st<T>(exp(nnc_ld(NNC_ROWS_AT(x, xs, i, cols))));
    }
}

template <typename T>
__device__ void ew_log(const T* x, long long xs, T* y, long long ys, long long n, long long cols) {
    NNC_GRID_STRIDE(i, n) {
        NNC_ROWS_AT(y, ys, i, cols) = nnc_st<T>(log(nnc_ld(NNC_ROWS_AT(x, xs, i, cols))));
    }
}

template <typename T>
__device__ void ew_relu(const T* x, long long xs, T* y, long long ys, long long n,
                        long long cols) {
    // x > 0 ? x : 0 would turn NaN into 0; NNC (and CPU_REF's np.maximum) keep NaN.
    NNC_GRID_STRIDE(i, n) {
        nnc_acc_t<T> v = nnc_ld(NNC_ROWS_AT(x, xs, i, cols));
        NNC_ROWS_AT(y, ys, i, cols) = nnc_st<T>((v < 0) ? 0 : v);
    }
}

template <typename T>
__device__ void scalar_mul(nnc_acc_t<T> a, const T* x, long long xs, T* y, long long ys,
                           long long n, long long cols) {
    NNC_GRID_STRIDE(i, n) {
        NNC_ROWS_AT(y, ys, i, cols) = nnc_st<T>(a * nnc_ld(NNC_ROWS_AT(x, xs, i, cols)));
    }
}

template <typename T>
__device__ void set_value(nnc_acc_t<T> value, T* y, long long ys, long long n, long long cols) {
    const T v = nnc_st<T>(value);
    NNC_GRID_STRIDE(i, n) { NNC_ROWS_AT(y, ys, i, cols) = v; }
}

// The epilogue of a convolution whose library call could not fuse it
// (nnc/cmd/convolution/gpu/cudnn.py): y = y + bias[c] (bias may be NULL), then ReLU if relu, in
// place over rows of `cols` channels spaced ys apart (a concat slice as output). NaN stays NaN,
// as in ew_relu and conv_direct.
template <typename T>
__device__ void bias_act(const T* bias, int relu, T* y, long long ys, long long n,
                         long long cols) {
    NNC_GRID_STRIDE(i, n) {
        nnc_acc_t<T> v = nnc_ld(NNC_ROWS_AT(y, ys, i, cols));
        if (bias) v += nnc_ld(bias[i % cols]);
        NNC_ROWS_AT(y, ys, i, cols) = nnc_st<T>((relu && v < 0) ? 0 : v);
    }
}

#define NNC_EW(T, S)                                                                        \
extern "C" __global__ void nnc_ewsum_##S(nnc_ptrs in, int count, T* y, long long n) {      \
    ew_reduce<T, false>(in, count, y, n); }                                                 \
extern "C" __global__ void nnc_ewprod_##S(nnc_ptrs in, int count, T* y, long long n) {     \
    ew_reduce<T, true>(in, count, y, n); }                                                  \
extern "C" __global__ void nnc_ewdiv_##S(const T* a, const T* b, T* y, long long n) {      \
    ew_div<T>(a, b, y, n); }

#define NNC_UNARY_ARGS(T) const T* x, long long xs, T* y, long long ys, long long n, long long cols
#define NNC_EW_UNARY(T, S)                                                                  \
extern "C" __global__ void nnc_ewexp_##S(NNC_UNARY_ARGS(T)) { ew_exp<T>(x, xs, y, ys, n, cols); } \
extern "C" __global__ void nnc_ewlog_##S(NNC_UNARY_ARGS(T)) { ew_log<T>(x, xs, y, ys, n, cols); } \
extern "C" __global__ void nnc_relu_##S(NNC_UNARY_ARGS(T)) { ew_relu<T>(x, xs, y, ys, n, cols); } \
extern "C" __global__ void nnc_scalar_mul_##S(nnc_acc_t<T> a, NNC_UNARY_ARGS(T)) {                      \
    scalar_mul<T>(a, x, xs, y, ys, n, cols); }                                              \
extern "C" __global__ void nnc_set_##S(nnc_acc_t<T> value, T* y, long long ys, long long n,\
                                       long long cols) {                                    \
    set_value<T>(value, y, ys, n, cols); }                                                  \
extern "C" __global__ void nnc_bias_act_##S(const T* bias, int relu, T* y, long long ys,   \
                                            long long n, long long cols) {                  \
    bias_act<T>(bias, relu, y, ys, n, cols); }

NNC_EW(nnc_half, f16)
NNC_EW(float, f32)
NNC_EW(double, f64)
NNC_EW_UNARY(nnc_half, f16)
NNC_EW_UNARY(float, f32)
NNC_EW_UNARY(double, f64)
