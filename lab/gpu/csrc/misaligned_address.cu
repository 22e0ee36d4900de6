// Misaligned 4-byte stores: the packed-header writer treats a byte offset as
// if it were 4-byte aligned.  Expected: cudaErrorMisalignedAddress (716).
#include <cstdint>
#include <cstdio>
#include "cuda_check.h"

__global__ void pack_kv_header_kernel(char* packed, int num_headers, int header_bytes) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_headers) return;
  // header_bytes is 13: &packed[i * 13 + 1] is not 4-byte aligned
  uint32_t* len_field = reinterpret_cast<uint32_t*>(packed + (size_t)i * header_bytes + 1);
  *len_field = 0xC0DE0000u | (uint32_t)i;  // FAULT_LINE
}

int main() {
  const int n = 256, header_bytes = 13;
  char* d = nullptr;
  checkCudaErrors(cudaMalloc(&d, (size_t)n * header_bytes + 64));
  printf("pack_kv_header_kernel<<<%d, %d>>>(packed=%p, num_headers=%d, header_bytes=%d)\n",
         n / 128, 128, (void*)d, n, header_bytes);
  fflush(stdout);
  pack_kv_header_kernel<<<n / 128, 128>>>(d, n, header_bytes);
  checkCudaErrors(cudaGetLastError());
  checkCudaErrors(cudaDeviceSynchronize());
  printf("done\n");
  return 0;
}
