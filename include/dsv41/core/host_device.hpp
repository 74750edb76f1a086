// Host/device annotation for small functions shared by the CPU reference and CUDA kernels.
#pragma once
#if defined(__CUDACC__)
#define DSV41_HD __host__ __device__
#else
#define DSV41_HD
#endif
