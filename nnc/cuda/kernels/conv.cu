// CONVOLUTION (direct), CONVOLUTION_TRANSPOSE and MAX_POOL / AVG_POOL, NHWC (nnc/cmd/convolution/,
// nnc/cmd/pooling/). One thread per output element (n, i, j, o), grid-stride. Channels have unit
// stride; pixels of x and out may be further apart than C / O elements (x_ps, o_ps), so an
// Inception concat slice (buf[..., c0:c1]) is written in place. Zero padding is skipped, not
// read.
// Accumulates in nnc_acc_t<T> (float for float16).

struct nnc_window_t {
    long long n;                 // images
    int h, w, c;                 // input height, width, channels
    int ho, wo, o;               // output height, width, channels
    int kh, kw, sh, sw, pt, pl;  // window, stride, top / left padding
    int groups;                  // CONVOLUTION only: C and O split into groups
    int count_include_pad;       // AVG_POOL only: divide by kh * kw
    int relu;                    // CONVOLUTION only: fused ReLU (activation="relu")
    long long x_ps, o_ps;        // elements between consecutive pixels of x / out
};

// CONVOLUTION_TRANSPOSE's geometry: w is [C, kh, kw, O / groups] (input channels first), taps
// are dh / dw apart. Output padding needs no field: it only makes ho / wo larger.
struct nnc_convt_t {
    long long n;                         // images
    int h, w, c;                         // input height, width, channels
    int ho, wo, o;                       // output height, width, channels
    int kh, kw, sh, sw, dh, dw, pt, pl;  // kernel, stride, dilation, top / left padding
    int groups;                          // C and O split into groups
    long long x_ps, o_ps;                // elements between consecutive pixels of x / out
};

// Output element e of [n, ho, wo, channels] -> its channel, pixel index p over (n, i, j), row
// i, column j and image n (G: nnc_window_t or nnc_convt_t).
struct nnc_at_t { int ch, i, j; long long p, n; };

template <typename G>
__device__ __forceinline__ nnc_at_t nnc_at(const G& g, long long e, int channels) {
    nnc_at_t a;
    a.ch = (int)(e % channels);
    a.p = e / channels;
    a.j = (int)(a.p % g.wo);
    a.i = (int)((a.p / g.wo) % g.ho);
    a.n = a.p / ((long long)g.wo * g.ho);
    return a;
}

// Calls f(a, b, pixel) for every kernel tap (a, b) of output pixel `at` that lands on a real
// input pixel (padding is skipped, never read); pixel indexes x's pixels over (n, y, x).
template <typename F>
__device__ __forceinline__ void nnc_for_taps(const nnc_window_t& g, const nnc_at_t& at, F f) {
    for (int a = 0; a < g.kh; a++) {
        int y = at.i * g.sh - g.pt + a;
        if (y < 0 || y >= g.h) continue;
        for (int b = 0; b < g.kw; b++) {
            int xc = at.j * g.sw - g.pl + b;
            if (xc < 0 || xc >= g.w) continue;
            f(a, b, (at.n * g.h + y) * g.w + xc);
        }
    }
}

template <typename T>
__device__ void conv_direct(nnc_window_t g, const T* x, const T* wt, const T* bias, T* out) {
    typedef nnc_acc_t<T> A;
    const long long total = g.n * g.ho * g.wo * g.o;
    const int cg = g.c / g.groups, og = g.o / g.groups;
    NNC_GRID_STRIDE(e, total) {
        const nnc_at_t at = nnc_at(g, e, g.o);
        const int o = at.ch, c0 = (o / og) * cg;
        const T* wo = wt + (long long)o * g.kh * g.kw * cg;  // w[o, :, :, :]
        A acc = bias ? nnc_ld(bias[o]) : (A)0;
        nnc_for_taps(g, at, [&](int a, int b, long long pixel) {
            const T* xp = x + pixel * g.x_ps + c0;
            const T* wp = wo + ((long long)a * g.kw + b) * cg;
            for (int c = 0; c < cg; c++) acc += nnc_ld(xp[c]) * nnc_ld(wp[c]);
        });
        // max(acc, 0) but NaN stays NaN, as the CPU epilogue and RELU do.
        out[at.p * g.o_ps + o] = nnc_st<T>((g.relu && acc < (A)0) ? (A)0 : acc);
    }
}

// The transposed convolution gathered: tap (a, b) of input pixel (y, x) lands on output pixel
// (y * sh - pt + a * dh, x * sw - pl + b * dw), so output row i takes tap a from input row
// (i + pt - a * dh) / sh where that divides exactly and lies inside x, likewise columns. Each
// output element is summed by one thread in a fixed order: no atomics, the same bits every run.
template <typename T>
__device__ void conv_transpose(nnc_convt_t g, const T* x, const T* wt, const T* bias, T* out) {
    typedef nnc_acc_t<T> A;
    const long long total = g.n * g.ho * g.wo * g.o;
    const int cg = g.c / g.groups, og = g.o / g.groups;
    // Consecutive input channels of w[:, a, b, o] are kh * kw * og elements apart.
    const long long c_step = (long long)g.kh * g.kw * og;
    NNC_GRID_STRIDE(e, total) {
        const nnc_at_t at = nnc_at(g, e, g.o);
        const int o = at.ch, c0 = (o / og) * cg;
        const T* wo = wt + (long long)c0 * c_step + o % og;   // w[c0, 0, 0, o % og]
        A acc = bias ? nnc_ld(bias[o]) : (A)0;
        for (int a = 0; a < g.kh; a++) {
            const int ty = at.i + g.pt - a * g.dh;
            if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.h) continue;
            for (int b = 0; b < g.kw; b++) {
                const int tx = at.j + g.pl - b * g.dw;
                if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.w) continue;
                const T* xp = x + ((at.n * g.h + ty / g.sh) * g.w + tx / g.sw) * g.x_ps + c0;
                const T* wp = wo + ((long long)a * g.kw + b) * og;
                for (int c = 0; c < cg; c++) acc += nnc_ld(xp[c]) * nnc_ld(wp[c * c_step]);
            }
        }
        out[at.p * g.o_ps + o] = nnc_st<T>(acc);
    }
}

template <typename T, bool MAX>
__device__ void pool(nnc_window_t g, const T* x, T* out) {
    typedef nnc_acc_t<T> A;
    const long long total = g.n * g.ho * g.wo * g.c;
    NNC_GRID_STRIDE(e, total) {
        const nnc_at_t at = nnc_at(g, e, g.c);
        const int c = at.ch;
        A acc = MAX ? nnc_neg_inf<A>() : (A)0;
        int real = 0;
        nnc_for_taps(g, at, [&](int, int, long long pixel) {
            A v = nnc_ld(x[pixel * g.x_ps + c]);
            // v > acc is false for NaN: keep a NaN once seen, as np.maximum does.
            if (MAX) acc = (v > acc || v != v) ? v : acc;
            else acc += v;
            real++;
        });
        if (!MAX) acc /= (A)(g.count_include_pad ? g.kh * g.kw : real);
        out[at.p * g.o_ps + c] = nnc_st<T>(acc);
    }
}

#define NNC_WINDOW(T, S)                                                                    \
extern "C" __global__ void nnc_conv_##S(nnc_window_t g, const T* x, const T* w,            \
                                        const T* bias, T* out) {                            \
    conv_direct<T>(g, x, w, bias, out); }                                                   \
extern "C" __global__ void nnc_conv_transpose_##S(nnc_convt_t g, const T* x, const T* w,   \
                                                  const T* bias, T* out) {                  \
    conv_transpose<T>(g, x, w, bias, out); }                                                \
extern "C" __global__ void nnc_max_pool_##S(nnc_window_t g, const T* x, T* out) {          \
    pool<T, true>(g, x, out); }                                                             \
extern "C" __global__ void nnc_avg_pool_##S(nnc_window_t g, const T* x, T* out) {          \
    pool<T, false>(g, x, out); }

NNC_WINDOW(nnc_half, f16)
NNC_WINDOW(float, f32)
NNC_WINDOW(double, f64)
