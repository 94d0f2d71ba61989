#ifndef SHARDPS_KERNELS_HOSTDEVICE_H_
#define SHARDPS_KERNELS_HOSTDEVICE_H_

// Marks a function callable from host and device code. Elementwise math is
// written once with it, so the CPU tests run the code that the GPU runs.
#if defined(__CUDACC__)
#define PS_HOSTDEVICE __host__ __device__
#else
#define PS_HOSTDEVICE
#endif

#endif  // SHARDPS_KERNELS_HOSTDEVICE_H_
