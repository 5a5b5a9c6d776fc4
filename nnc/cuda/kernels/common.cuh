// Shared by every nnc kernel file (nnc/cuda/kernels.py prepends it; NVRTC needs no headers).
// Element counts and offsets are long long: a tensor may hold more than 2^31 elements.
// Each kernel file defines templates and instantiates them once per dtype under C names
// "nnc_<kernel>_f32" / "nnc_<kernel>_f64", which nnc/cuda/backends.py looks up.

#define NNC_GRID_STRIDE(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (long long)blockDim.x * gridDim.x)

template <typename T> __device__ __forceinline__ T nnc_neg_inf();
template <> __device__ __forceinline__ float nnc_neg_inf<float>() {
    return __int_as_float(0xff800000);
}
template <> __device__ __forceinline__ double nnc_neg_inf<double>() {
    return __longlong_as_double(0xfff0000000000000ULL);
}
