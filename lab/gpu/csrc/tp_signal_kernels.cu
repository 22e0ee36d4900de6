// Kernels of the TP=4 miniature (lab/gpu/minitp).  Built with
//   nvcc -cubin -arch=sm_90 -lineinfo -o tp_signal_kernels.cubin tp_signal_kernels.cu
// and loaded by the workers with cuModuleLoad (cuda.bindings.driver).
#include <cstdint>

// Stand-in for the model's per-layer work on this rank's shard: a residual
// RMS-norm over the rank's activation rows.  Benign.
extern "C" __global__ void fused_add_rmsnorm_shard_kernel(float* __restrict__ x,
                                                         const float* __restrict__ residual,
                                                         int rows, int cols, float eps) {
  int row = blockIdx.x;
  if (row >= rows) return;
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = x[(size_t)row * cols + c] + residual[(size_t)row * cols + c];
    x[(size_t)row * cols + c] = v;
    acc += v * v;
  }
  __shared__ float red[32];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x == 0) red[0] = rsqrtf(acc / cols + eps);
  }
  __syncthreads();
  float scale = red[0];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) x[(size_t)row * cols + c] *= scale;
}

// One-shot all-reduce, phase 1: every rank publishes its flag for every peer
// into the signal pad.  flag_offset_words selects this step's flag slot; it
// is computed on the host from the step counter (the planted bug corrupts it).
extern "C" __global__ void oneshot_allreduce_flag_kernel(uint32_t* signal_pad,
                                                        unsigned long long flag_offset_words,
                                                        unsigned long long peer_stride_words,
                                                        uint32_t flag, int world_size) {
  int peer = threadIdx.x;
  if (peer < world_size) {
    uint32_t* slot = signal_pad + flag_offset_words + (unsigned long long)peer * peer_stride_words;
    *slot = flag;  // FAULT_LINE: store of the flag into the peer's slot
  }
}
