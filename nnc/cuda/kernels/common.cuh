// Shared by every nnc kernel file (nnc/cuda/nvrtc.py prepends it; NVRTC needs no headers).
// Element counts and offsets are long long: a tensor may hold more than 2^31 elements.
// Each kernel file defines templates and instantiates them once per dtype under C names
// "nnc_<kernel>_f16" / "nnc_<kernel>_f32" / "nnc_<kernel>_f64", which nnc/cuda/runner.py
// (kernel_function) looks up.

#define NNC_GRID_STRIDE(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (long long)blockDim.x * gridDim.x)

// float16 storage (IEEE binary16, NumPy's float16), converted with the PTX cvt instructions
// rather than cuda_fp16.h: NVRTC does not ship that header on every install, and nnc's kernels
// need no half arithmetic, only loads and stores around float math.
struct __align__(2) nnc_half { unsigned short bits; };

// Every kernel computes in nnc_acc_t<T>: float for float16 and float32, double for float64.
// Values are read with nnc_ld and written with nnc_st (round to nearest even for float16).
template <typename T> struct nnc_acc { typedef T type; };
template <> struct nnc_acc<nnc_half> { typedef float type; };
template <typename T> using nnc_acc_t = typename nnc_acc<T>::type;

template <typename T> __device__ __forceinline__ nnc_acc_t<T> nnc_ld(T v) { return v; }
template <> __device__ __forceinline__ float nnc_ld<nnc_half>(nnc_half v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}
template <typename T> __device__ __forceinline__ T nnc_st(nnc_acc_t<T> v) { return v; }
template <> __device__ __forceinline__ nnc_half nnc_st<nnc_half>(float v) {
    nnc_half h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
    return h;
}

template <typename T> __device__ __forceinline__ T nnc_neg_inf();
template <> __device__ __forceinline__ float nnc_neg_inf<float>() {
    return __int_as_float(0xff800000);
}
template <> __device__ __forceinline__ double nnc_neg_inf<double>() {
    return __longlong_as_double(0xfff0000000000000ULL);
}
