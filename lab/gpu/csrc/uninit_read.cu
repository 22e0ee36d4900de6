// Reads device memory that was never written: the bias buffer is allocated
// but its cudaMemcpy was skipped.
#include <cstdio>
#include <vector>
#include "cuda_check.h"

__global__ void add_bias_kernel(float* x, const float* bias, int rows, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  x[i] += bias[i % cols];  // UNINIT_LINE
}

int main() {
  const int rows = 64, cols = 512, n = rows * cols;
  std::vector<float> h(n, 1.0f);
  float *d_x, *d_bias;
  checkCudaErrors(cudaMalloc(&d_x, n * sizeof(float)));
  checkCudaErrors(cudaMalloc(&d_bias, cols * sizeof(float)));   // never initialised
  checkCudaErrors(cudaMemcpy(d_x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  add_bias_kernel<<<(n + 255) / 256, 256>>>(d_x, d_bias, rows, cols);
  checkCudaErrors(cudaGetLastError());
  checkCudaErrors(cudaMemcpy(h.data(), d_x, n * sizeof(float), cudaMemcpyDeviceToHost));
  printf("x[0]=%g x[%d]=%g\n", h[0], n - 1, h[n - 1]);
  return 0;
}
