// Attention of a few new tokens over a key/value cache on the GPU, float16: split over the cache's columns
// (flash decoding). Kernel 1 (`attend`): a block of 128 threads per (column range, query head, token) scores its
// columns (16-byte loads of each key, fp32 sums, a key's chunks on a group of lanes), takes their softmax and sums
// the values it weighs, and writes that partial output with its max and sum to a float32 workspace; columns of the
// new tokens are read from the op's key/value inputs, so no block waits for another's cache write. Kernel 2
// (`combine`): a block per (query head, token) merges the ranges' partials into the output and writes the new keys
// and values into the cache. Both are launched as programmatic dependents (Hopper and later): each starts while the
// kernel before ends and waits for its output before reading any input (with NNDF_ORT_ATTENTION_EARLY=1, for
// measurements, `attend` loads its first columns of a cache the graph only reads, causal=0, before it waits).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "attention.h"
#include "launch.h"

namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kMinColumns = 64, kMaxSplits = 16;  // columns a block takes, at least; blocks a cache row, at most
constexpr int kAhead = 8;  // loads of keys (and values) in flight a thread

struct Params {
  const __half* q;
  const __half* k;
  const __half* v;
  int64_t q_stride, kv_stride;
  __half* cache_k;
  __half* cache_v;
  const int32_t* seqlens;
  const __half* bias;
  int reach;
  const __half* key_bias;  // [B, length] or null
  int causal;
  __half* y;
  float* partial;  // [tokens * heads, splits, head_dim]
  float2* stats;   // [tokens * heads, splits]: the block's max score and its sum of exp(score - max)
  int seq, heads, group, length, columns, splits, window, head_dim;
  float scale;
  int early;  // the cache's first loads before the wait (causal=0 only: a cache the graph only reads)
};

__device__ __forceinline__ void wait_for_inputs() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void let_next_start() { asm volatile("griddepcontrol.launch_dependents;"); }

__device__ __forceinline__ void unpack(const uint4& chunk, float (&out)[8]) {
  const __half2* h = reinterpret_cast<const __half2*>(&chunk);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// the first and last + 1 columns query `s` of row `b` sees, and its own column
struct Span {
  int first, end, column;
};
__device__ __forceinline__ Span span(const Params& p, int b, int s) {
  if (!p.causal) return {0, p.length, 0};
  const int total = p.seqlens[b] + 1, column = total - p.seq + s;
  const int first = p.window > 0 ? max(0, column - p.window + 1) : 0;
  return {first, min(column + 1, p.length), column};
}

// 16-byte chunk `chunk` of column c's key (or value) of row b, kv head j: from the cache, or from the new tokens'
// rows for the columns they are written to
__device__ __forceinline__ uint4 load(const __half* cache, const __half* fresh, const Params& p, int b, int j, int c,
                                      int fresh_from, int head_dim, int chunk) {
  if (c >= fresh_from) {
    const __half* row = fresh + (static_cast<int64_t>(b) * p.seq + (c - fresh_from)) * p.kv_stride + j * head_dim;
    return reinterpret_cast<const uint4*>(row)[chunk];
  }
  const __half* row = cache + ((static_cast<int64_t>(b) * (p.heads / p.group) + j) * p.length + c) * head_dim;
  return reinterpret_cast<const uint4*>(row)[chunk];
}

// A head of D = 8 * chunks columns: its 16-byte chunks on Lanes lanes (at least as many), 32 / Lanes columns a
// warp at once.
// kBlocks: blocks a multiprocessor must hold at once (registers capped to fit them: 4 fit 512 blocks, flan-T5-XL's
// cross-attention at 8 rows, on an H100's 132 multiprocessors in one wave; 1: as many registers as the compiler likes,
// 152 a thread, 3 blocks)
template <int kLanes, int kBlocks>
__global__ void __launch_bounds__(kThreads, kBlocks) attend(Params p) {
  constexpr int kGroups = 32 / kLanes;
  extern __shared__ float scores[];  // p.columns
  __shared__ float reduce[kWarps];
  __shared__ float sums[kWarps][kLanes * 8];
  const int D = p.head_dim, chunks = D / 8;
  const int split = blockIdx.x, head = blockIdx.y, token = blockIdx.z;
  const int b = token / p.seq, s = token % p.seq, j = head / p.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, chunk = lane % kLanes, group = lane / kLanes;
  const bool active = chunk < chunks;
  const int64_t slot = (static_cast<int64_t>(token) * p.heads + head) * p.splits + split;
  // column c by group `group` of warp `warp`, in passes of kStep columns, kAhead passes' loads in flight a round;
  // the first round's values are loaded with its keys (one wait for both where a block's columns fit a round)
  constexpr int kStep = kWarps * kGroups, kRound = kAhead * kStep;
  uint4 keys[kAhead], values[kAhead];
  // Without causal, the cache is one the graph only reads (a cross-attention's buffers, graph inputs made before
  // the step): never the output of the kernel just before, so the first round's loads go out before the wait
  // (`early`; the queries, the new columns and the biases are read after it)
  const bool early = p.early && !p.causal;
  if (early) {
    const int first = split * p.columns, end = min(p.length, first + p.columns);
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int c = first + warp * kGroups + a * kStep + group;
      const bool live = active && c < end;
      keys[a] = live ? load(p.cache_k, p.k, p, b, j, c, INT_MAX, D, chunk) : make_uint4(0, 0, 0, 0);
      values[a] = live ? load(p.cache_v, p.v, p, b, j, c, INT_MAX, D, chunk) : make_uint4(0, 0, 0, 0);
    }
  }
  wait_for_inputs();
  let_next_start();
  const Span sp = span(p, b, s);
  const int first = max(sp.first, split * p.columns), end = min(sp.end, split * p.columns + p.columns);
  if (first >= end) {
    if (threadIdx.x == 0) p.stats[slot] = make_float2(-INFINITY, 0.f);
    return;
  }
  const int fresh_from = p.causal ? sp.column - s : INT_MAX;  // the row's first new column
  float q[8] = {};
  if (active) {
    unpack(reinterpret_cast<const uint4*>(p.q + static_cast<int64_t>(token) * p.q_stride + head * D)[chunk], q);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] *= p.scale;
  }
  for (int round = first + warp * kGroups; round < end; round += kRound) {
    const bool initial = round == first + warp * kGroups;
    if (!(early && initial)) {
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
        const int c = round + a * kStep + group;
        const bool live = active && c < end;
        keys[a] = live ? load(p.cache_k, p.k, p, b, j, c, fresh_from, D, chunk) : make_uint4(0, 0, 0, 0);
        if (initial)
          values[a] = live ? load(p.cache_v, p.v, p, b, j, c, fresh_from, D, chunk) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int c = round + a * kStep + group;
      float key[8], dot = 0.f;
      unpack(keys[a], key);
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = fmaf(q[i], key[i], dot);
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      if (chunk == 0 && c < end) {
        if (p.bias)
          dot += __half2float(p.bias[(min(max(c - sp.column, -p.reach), p.reach) + p.reach) * p.heads + head]);
        if (p.key_bias) dot += __half2float(p.key_bias[static_cast<int64_t>(b) * p.length + c]);
        scores[c - first] = dot;
      }
    }
  }
  __syncthreads();
  const int n = end - first;
  float top = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) top = fmaxf(top, scores[i]);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
  if (lane == 0) reduce[warp] = top;
  __syncthreads();
  top = reduce[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) top = fmaxf(top, reduce[w]);
  float total = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float e = __expf(scores[i] - top);
    scores[i] = e;
    total += e;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
  __syncthreads();  // every warp has read reduce[] and written its weights
  if (lane == 0) reduce[warp] = total;
  float acc[8] = {};
  for (int round = first + warp * kGroups; round < end; round += kRound) {
    if (round != first + warp * kGroups) {
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
        const int c = round + a * kStep + group;
        values[a] = active && c < end ? load(p.cache_v, p.v, p, b, j, c, fresh_from, D, chunk) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int c = round + a * kStep + group;
      if (c < end) {
        float value[8];
        unpack(values[a], value);
        const float weight = scores[c - first];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] = fmaf(weight, value[i], acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int offset = kLanes; offset < 32; offset <<= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], offset);
  if (group == 0 && active)
#pragma unroll
    for (int i = 0; i < 8; ++i) sums[warp][chunk * 8 + i] = acc[i];
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += sums[w][d];
    p.partial[slot * D + d] = o;
  }
  if (threadIdx.x == 0) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += reduce[w];
    p.stats[slot] = make_float2(top, sum);
  }
}

// One block per (query head, token): the partials merged into y; blocks of the first kv heads write the token's
// new key and value into the cache.
__global__ void combine(Params p) {
  const int head = blockIdx.x, token = blockIdx.y, d = threadIdx.x, D = p.head_dim;
  const int b = token / p.seq, s = token % p.seq;
  wait_for_inputs();
  let_next_start();
  const int64_t slots = (static_cast<int64_t>(token) * p.heads + head) * p.splits;
  float top = -INFINITY;
  for (int i = 0; i < p.splits; ++i) top = fmaxf(top, p.stats[slots + i].x);
  float total = 0.f, o = 0.f;
  for (int i = 0; i < p.splits; ++i) {
    const float2 st = p.stats[slots + i];
    if (st.y == 0.f) continue;  // no column of this range
    const float w = __expf(st.x - top);
    total += w * st.y;
    o += w * p.partial[(slots + i) * D + d];
  }
  p.y[static_cast<int64_t>(token) * p.heads * D + head * D + d] = __float2half_rn(total > 0.f ? o / total : 0.f);
  const int kv_heads = p.heads / p.group;
  if (p.causal && head < kv_heads) {
    const int column = span(p, b, s).column;
    if (column >= 0 && column < p.length) {
      const int64_t at = ((static_cast<int64_t>(b) * kv_heads + head) * p.length + column) * D + d;
      const int64_t from = static_cast<int64_t>(token) * p.kv_stride + head * D + d;
      p.cache_k[at] = p.k[from];
      p.cache_v[at] = p.v[from];
    }
  }
}

bool programmatic_launch() {  // read at every launch (a captured graph keeps what it was captured with)
  return !env_starts("NNDF_ORT_ATTENTION_PDL", '0');
}

// a cache the graph only reads (causal=0) loaded after the wait (the default), or before it
// (NNDF_ORT_ATTENTION_EARLY=1, read at every launch, for measurements)
bool early_loads() {
  return env_starts("NNDF_ORT_ATTENTION_EARLY", '1');
}

// `attend` with its registers capped for 4 blocks a multiprocessor (the default), or uncapped
// (NNDF_ORT_ATTENTION_BLOCKS=1, read at every launch, for measurements)
bool capped_registers() {
  return !env_starts("NNDF_ORT_ATTENTION_BLOCKS", '1');
}

template <int kLanes, int kBlocks>
cudaError_t run(const Params& p, int tokens, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(p.columns) * sizeof(float);
  cudaError_t status = cudaSuccess;
  if (shared > 48 * 1024) {
    status = cudaFuncSetAttribute(attend<kLanes, kBlocks>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared));
    if (status != cudaSuccess) return status;
  }
  status = launch_programmatic(programmatic_launch(), attend<kLanes, kBlocks>, dim3(p.splits, p.heads, tokens),
                               dim3(kThreads), shared, stream, p);
  if (status != cudaSuccess) return status;
  return launch_programmatic(programmatic_launch(), combine, dim3(p.heads, tokens), dim3(p.head_dim), 0, stream,
                             p);
}

template <int kLanes>
cudaError_t run(const Params& p, int tokens, cudaStream_t stream) {
  return capped_registers() ? run<kLanes, 4>(p, tokens, stream) : run<kLanes, 1>(p, tokens, stream);
}

}  // namespace

int64_t nndf_attention_columns(int64_t length) {
  int64_t columns = (length + kMaxSplits - 1) / kMaxSplits;
  columns = (columns + 31) / 32 * 32;
  return columns < kMinColumns ? kMinColumns : columns;
}

int64_t nndf_attention_workspace(const AttentionArgs& a) {
  const int64_t columns = nndf_attention_columns(a.length), splits = (a.length + columns - 1) / columns;
  return a.batch * a.seq * a.heads * splits * (a.head_dim + 2);
}

bool nndf_attention_head_size(int64_t d) { return d > 0 && d <= 256 && d % 8 == 0; }

const char* nndf_attention_cuda(const AttentionArgs& a, float* workspace, void* stream_handle) {
  if (!nndf_attention_head_size(a.head_dim)) return "nndf Attention: no CUDA kernel for this head size";
  const int64_t columns = nndf_attention_columns(a.length), splits = (a.length + columns - 1) / columns;
  const int64_t slots = a.batch * a.seq * a.heads * splits;
  Params p{static_cast<const __half*>(a.q), static_cast<const __half*>(a.k), static_cast<const __half*>(a.v),
           a.q_stride, a.kv_stride, static_cast<__half*>(a.cache_k), static_cast<__half*>(a.cache_v), a.seqlens,
           static_cast<const __half*>(a.bias), static_cast<int>(a.reach), static_cast<const __half*>(a.key_bias),
           a.causal ? 1 : 0, static_cast<__half*>(a.y),
           workspace, reinterpret_cast<float2*>(workspace + slots * a.head_dim), static_cast<int>(a.seq),
           static_cast<int>(a.heads), static_cast<int>(a.heads / a.kv_heads), static_cast<int>(a.length),
           static_cast<int>(columns), static_cast<int>(splits), static_cast<int>(a.window),
           static_cast<int>(a.head_dim), a.scale, early_loads() ? 1 : 0};
  const int tokens = static_cast<int>(a.batch * a.seq);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const size_t cache_bytes = static_cast<size_t>(a.batch * a.kv_heads * a.length * a.head_dim) * sizeof(__half);
  cudaError_t status = cudaSuccess;
  if (a.causal && a.past_k != a.cache_k)
    status = cudaMemcpyAsync(a.cache_k, a.past_k, cache_bytes, cudaMemcpyDeviceToDevice, stream);
  if (status == cudaSuccess && a.causal && a.past_v != a.cache_v)
    status = cudaMemcpyAsync(a.cache_v, a.past_v, cache_bytes, cudaMemcpyDeviceToDevice, stream);
  if (status != cudaSuccess) return cudaGetErrorString(status);
  const int64_t chunks = a.head_dim / 8;
  status = chunks <= 4 ? run<4>(p, tokens, stream) : chunks <= 8 ? run<8>(p, tokens, stream)
           : chunks <= 16 ? run<16>(p, tokens, stream) : run<32>(p, tokens, stream);
  if (status == cudaSuccess) status = cudaGetLastError();
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}
