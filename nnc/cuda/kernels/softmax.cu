// SOFTMAX of each row of a contiguous [rows, cols] tensor (nnc/cmd/softmax/ says what a row is).
// One block per row (grid-stride over rows); the block finds the row maximum, then sums
// exp(x - max) in double (as CPU_OPT does), then writes (float16 rounds once, at the store).
// In place (y == x) is safe: every read of x happens before the block's first write,
// separated by __syncthreads.

#define NNC_SOFTMAX_THREADS 256

template <typename T>
__device__ void softmax_rows(const T* x, T* y, long long rows, long long cols) {
    __shared__ double red[NNC_SOFTMAX_THREADS];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        double m = nnc_neg_inf<double>();
        for (long long j = threadIdx.x; j < cols; j += blockDim.x)
            m = fmax(m, (double)nnc_ld(xr[j]));
        red[threadIdx.x] = m;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) red[threadIdx.x] = fmax(red[threadIdx.x], red[threadIdx.x + s]);
            __syncthreads();
        }
        m = red[0];
        __syncthreads();
        double sum = 0;
        for (long long j = threadIdx.x; j < cols; j += blockDim.x)
            sum += exp((double)nnc_ld(xr[j]) - m);
        red[threadIdx.x] = sum;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
            __syncthreads();
        }
        sum = red[0];
        __syncthreads();  // red is reused by the next row
        for (long long j = threadIdx.x; j < cols; j += blockDim.x)
            yr[j] = nnc_st<T>((nnc_acc_t<T>)(exp((double)nnc_ld(xr[j]) - m) / sum));
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(NNC_SOFTMAX_THREADS)
nnc_softmax_f16(const nnc_half* x, nnc_half* y, long long rows, long long cols) {
    softmax_rows<nnc_half>(x, y, rows, cols); }
extern "C" __global__ void __launch_bounds__(NNC_SOFTMAX_THREADS)
nnc_softmax_f32(const float* x, float* y, long long rows, long long cols) {
    softmax_rows<float>(x, y, rows, cols); }
extern "C" __global__ void __launch_bounds__(NNC_SOFTMAX_THREADS)
nnc_softmax_f64(const double* x, double* y, long long rows, long long cols) {
    softmax_rows<double>(x, y, rows, cols); }
