# nnc's float32 GEMM tiles over packed weights (sgemm_kernel.h, static C compiled into each
# extension that cimports this): CONVOLUTION's and GEMM's CPU_OPT float32 hot path.

cdef extern from "cmd/gemm/sgemm_kernel.h" nogil:
    enum:
        NNC_ACT_NONE
        NNC_ACT_RELU
        NNC_ACT_CLAMP
        NNC_ACT_HSWISH
        NNC_ACT_SILU

    # Applied to each tile before it is stored: + bias[n], + residual[m, n], the activation.
    ctypedef struct nnc_epilogue_t:
        const float* bias
        const float* residual
        Py_ssize_t ldr
        int act
        float lo
        float hi

    ctypedef const float** nnc_rows_t

    # Rows per block of the tiles' loops (nnc_sgemm_packed_taps), where the weights do not
    # outweigh the rows (nnc_sgemm_block_rows); nnc_sgemm_set_row_blocks(0): always (A/B runs).
    enum:
        NNC_SGEMM_MC
    int nnc_sgemm_set_row_blocks(int on)   # returns the previous setting

    # Padding's zeros a tile may skip (the weights must be finite); NNC_SGEMM_ZEROS floats.
    enum:
        NNC_SGEMM_ZEROS
    const float nnc_sgemm_zeros[]

    int nnc_sgemm_nr(int isa)
    int nnc_sgemm_mr(int isa)
    Py_ssize_t nnc_sgemm_panel_width(int isa, Py_ssize_t n, Py_ssize_t p)
    size_t nnc_sgemm_packed_floats(int isa, Py_ssize_t n, Py_ssize_t k)
    void nnc_sgemm_pack(int isa, const float* b, Py_ssize_t sk, Py_ssize_t sn, Py_ssize_t n,
                        Py_ssize_t k, float* packed)
    void nnc_sgemm_pack_groups(int isa, const float* w, Py_ssize_t groups, Py_ssize_t n,
                               Py_ssize_t k, float* packed)
    void nnc_sgemm_packed_taps(int isa, Py_ssize_t m0, Py_ssize_t m1, Py_ssize_t n0,
                               Py_ssize_t n1, Py_ssize_t n, Py_ssize_t kt, Py_ssize_t taps,
                               nnc_rows_t a, Py_ssize_t ts, const float* packed, float* c,
                               Py_ssize_t ldc, const nnc_epilogue_t* ep)
    void nnc_sgemm_packed_ahead(int isa, Py_ssize_t m0, Py_ssize_t m1, Py_ssize_t n0,
                                Py_ssize_t n1, Py_ssize_t n, Py_ssize_t kt, Py_ssize_t taps,
                                nnc_rows_t a, Py_ssize_t ts, const float* packed, float* c,
                                Py_ssize_t ldc, const nnc_epilogue_t* ep, int ahead)
    void nnc_sgemm_packed(int isa, Py_ssize_t m0, Py_ssize_t m1, Py_ssize_t n0, Py_ssize_t n1,
                          Py_ssize_t n, Py_ssize_t k, nnc_rows_t a, const float* packed, float* c,
                          Py_ssize_t ldc, const nnc_epilogue_t* ep)
