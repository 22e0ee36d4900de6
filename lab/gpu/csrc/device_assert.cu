// A device-side assert: token ids are validated on the GPU before the
// embedding lookup; two ids are out of the vocabulary.  Expected: the
// assertion text from the device and then cudaErrorAssert (710).
#include <cassert>
#include <cstdio>
#include <vector>
#include "cuda_check.h"

__global__ void validate_token_ids_kernel(const int* token_ids, int n, int vocab_size) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int id = token_ids[i];
  assert(id >= 0 && id < vocab_size);  // FAULT_LINE
}

int main() {
  const int n = 1024, vocab = 32000;
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = (i * 7919) % vocab;
  h[133] = 32000;   // block 1, thread 5
  h[700] = -1;      // block 5, thread 60
  int* d = nullptr;
  checkCudaErrors(cudaMalloc(&d, n * sizeof(int)));
  checkCudaErrors(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  printf("validate_token_ids_kernel<<<%d, %d>>>(n=%d, vocab_size=%d)\n", n / 128, 128, n, vocab);
  fflush(stdout);
  validate_token_ids_kernel<<<n / 128, 128>>>(d, n, vocab);
  checkCudaErrors(cudaGetLastError());
  checkCudaErrors(cudaDeviceSynchronize());
  printf("done\n");
  return 0;
}
