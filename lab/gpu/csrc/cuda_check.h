// Error check in the style of cuda-samples' checkCudaErrors.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define checkCudaErrors(val) check_cuda((val), #val, __FILE__, __LINE__)
static inline void check_cuda(cudaError_t result, const char* func, const char* file, int line) {
  if (result) {
    fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\" \n", file, line,
            static_cast<unsigned int>(result), cudaGetErrorName(result), func);
    fprintf(stderr, "%s\n", cudaGetErrorString(result));
    exit(EXIT_FAILURE);
  }
}
