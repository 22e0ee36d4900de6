// A shared-memory race: a block-wide sum reads its neighbours' partial sums
// without a __syncthreads() between the write and the read.
#include <cstdio>
#include <vector>
#include "cuda_check.h"

__global__ void block_sum_missing_sync_kernel(const float* in, float* out, int n) {
  __shared__ float partial[256];
  int t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + t;
  partial[t] = i < n ? in[i] : 0.f;     // RACE_WRITE_LINE
  // missing __syncthreads() here
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];  // RACE_READ_LINE
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

int main() {
  const int n = 4096, threads = 256, blocks = n / threads;
  std::vector<float> h(n, 1.0f), r(blocks);
  float *d_in, *d_out;
  checkCudaErrors(cudaMalloc(&d_in, n * sizeof(float)));
  checkCudaErrors(cudaMalloc(&d_out, blocks * sizeof(float)));
  checkCudaErrors(cudaMemcpy(d_in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  block_sum_missing_sync_kernel<<<blocks, threads>>>(d_in, d_out, n);
  checkCudaErrors(cudaGetLastError());
  checkCudaErrors(cudaMemcpy(r.data(), d_out, blocks * sizeof(float), cudaMemcpyDeviceToHost));
  double total = 0;
  for (float v : r) total += v;
  printf("block sums: first=%.1f total=%.1f (expected %d)\n", r[0], total, n);
  return 0;
}
