#ifndef SHARDPS_KERNELS_BLAS_H_
#define SHARDPS_KERNELS_BLAS_H_

namespace shardps {

// Dense single-precision matrix products on the CPU, backed by OpenBLAS.
// Thread-safe: the functions keep no state of their own (OpenBLAS's thread
// pool is process-wide; see SetBlasThreads).

// C = alpha * op(A) * op(B) + beta * C, all matrices row-major.
// op(A) is m x k (A is k x m when trans_a), op(B) is k x n (B is n x k when
// trans_b), C is m x n. lda, ldb and ldc are the row strides in floats.
// REQUIRES: m, n, k >= 0; the leading dimensions are at least the number of
// columns of the stored matrices (and at least 1).
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta,
          float* c, int ldc);

// Sets the number of threads OpenBLAS uses for every later call in this
// process. n <= 0 is treated as 1.
void SetBlasThreads(int n);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_BLAS_H_
