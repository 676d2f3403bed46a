// The Attention op's kernels: the CPU reference (ops.cc) and the GPU launcher (attention.cu).
#pragma once
#include <stdint.h>

// One op's tensors and sizes. The new tokens' queries, keys and values are rows of q_stride / kv_stride elements
// ([B, S, ...]: query head h at h * head_dim of `q`'s row, key / value head j at j * head_dim of `k`'s / `v`'s
// rows); the cache is [B, kv_heads, length, head_dim] (`cache_k`, `cache_v`: the present buffers, holding the past);
// row b's total length is seqlens[b] + 1 (int32, on the op's device), its new tokens at columns total - S .. total
// - 1. Not `causal`: queries only, over every column of a cache that is not written (k, v, seqlens null).
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t q_stride = 0, kv_stride = 0;  // elements from one token's row to the next
  const void* past_k = nullptr;  // the past, copied into the cache first where it is not the same buffer
  const void* past_v = nullptr;
  void* cache_k = nullptr;
  void* cache_v = nullptr;
  const int32_t* seqlens = nullptr;
  const void* bias = nullptr;  // [2 * reach + 1, heads]: by key column minus query column, clipped; or null
  int64_t reach = 0;
  const void* key_bias = nullptr;  // [B, length]: added to every score of row b's column c; or null
  bool causal = true;  // false: no new tokens, the cache read only, every column seen (cross-attention)
  void* y = nullptr;  // [B, S, heads * head_dim]
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0, length = 0;
  int64_t window = 0;  // > 0: a query sees its last `window` columns, itself included
  float scale = 1.f;
};

// The columns a block of the GPU kernel takes for a cache `length` columns long, and how many such blocks cover it.
int64_t nndf_attention_columns(int64_t length);
// The float32 workspace the GPU launcher needs (elements): each block's partial output and its softmax's max and sum.
int64_t nndf_attention_workspace(const AttentionArgs& args);
// Whether the GPU kernel takes this head size.
bool nndf_attention_head_size(int64_t head_dim);
// The attention on the GPU (float16), the new keys and values written into the cache, on `stream` (a cudaStream_t).
// Returns null, or what failed.
const char* nndf_attention_cuda(const AttentionArgs& args, float* workspace, void* stream);
