// Linear (y = x . w^T + b, w [n, k] as a checkpoint stores it) on the GPU: blocks of 4 weight rows for one or two
// rows of x (the one-token steps of a decode graph), blocks of 16 weight rows on the tensor cores for 3-16 fp16 rows
// (beams, batches), cuBLAS through ONNX Runtime's own handle for more rows (a prompt pass). Both kernels of ours
// stream each weight row once in 16-byte loads, several in flight per thread, with fp32 sums; their first loads are
// issued before they wait on the kernel before (programmatic dependent launch), since the weights never depend on
// that kernel. x and the addend, which that kernel may still be writing when ours starts, are read after the wait
// (griddepcontrol.wait, which makes that kernel's writes visible to this one) with plain L1-cached loads (ld.ca),
// never through the read-only path: ld.global.nc promises data that does not change while the kernel runs, and with
// our kernels started early it gave wrong products (BLIP-large's and t5-base's fp16 graphs on an H100: logits off
// PyTorch's, tokens off HF's). Reads past L1 (ld.cg) were correct too, and 3% slower at flan-T5-XL's shapes, where
// the blocks on one multiprocessor can share x's lines in L1 (docs/PERFORMANCE.md G85, G86). With a norm (LayerNorm
// or RMSNorm over x's rows, `norm`), each block of the few-row kernel normalises
// x into shared memory after that wait and before its product, so the norm needs no kernel of its own; the
// normalised rows are written out too (spread over the blocks), for other readers; the tensor-core kernel takes an
// RMSNorm inside its product (scaling by each row's rstd as it writes); any other norm is a kernel of its own. A
// gated activation (gate and up rows in pairs) is applied as our kernels write, or by a kernel after cuBLAS's
// product.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <link.h>
#include <atomic>
#include <initializer_list>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "linear.h"

namespace {

template <typename T> struct Pack;  // a 16-byte load as floats
template <> struct Pack<__half> {
  static constexpr int kCount = 8;
  __device__ static void add(const uint4& w, const uint4& x, float& acc) {
    const __half2* a = reinterpret_cast<const __half2*>(&w);
    const __half2* b = reinterpret_cast<const __half2*>(&x);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 fa = __half22float2(a[i]), fb = __half22float2(b[i]);
      acc = fmaf(fa.x, fb.x, acc);
      acc = fmaf(fa.y, fb.y, acc);
    }
  }
};
template <> struct Pack<float> {
  static constexpr int kCount = 4;
  __device__ static void add(const uint4& w, const uint4& x, float& acc) {
    const float* a = reinterpret_cast<const float*>(&w);
    const float* b = reinterpret_cast<const float*>(&x);
#pragma unroll
    for (int i = 0; i < 4; ++i) acc = fmaf(a[i], b[i], acc);
  }
};

__device__ __forceinline__ float as_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float as_float(float v) { return v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

// a gated activation's gate: SiLU (kLinearSiluGated) or GELU's tanh form (kLinearGeluGated)
__device__ __forceinline__ float gated(int activation, float gate) {
  if (activation == kLinearSiluGated) return gate / (1.f + __expf(-gate));
  const float inner = 0.7978845608028654f * fmaf(0.044715f * gate, gate * gate, gate);
  return 0.5f * gate * (1.f + tanhf(inner));
}

// a 16-byte chunk as Pack<T>::kCount floats, and back
template <typename T>
__device__ __forceinline__ void unpack(const uint4& chunk, float* out) {
  const T* v = reinterpret_cast<const T*>(&chunk);
#pragma unroll
  for (int i = 0; i < Pack<T>::kCount; ++i) out[i] = as_float(v[i]);
}
template <typename T>
__device__ __forceinline__ uint4 pack(const float* in) {
  uint4 chunk;
  T* v = reinterpret_cast<T*>(&chunk);
#pragma unroll
  for (int i = 0; i < Pack<T>::kCount; ++i) store(v + i, in[i]);
  return chunk;
}

// the sum of each thread's `v[i]` over the block, in every thread (`scratch`: N floats a warp)
template <int N, int Threads>
__device__ __forceinline__ void block_sum(float (&v)[N], float (*scratch)[N]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
    if (lane == 0) scratch[warp][i] = v[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i] = 0.f;
#pragma unroll
    for (int j = 0; j < Threads / 32; ++j) v[i] += scratch[j][i];
  }
}

// Norm over the M rows of x [M, k] (kLinearLayerNorm: (x - mean) / sqrt(var + eps) * gamma + beta; kLinearRmsNorm:
// x / sqrt(mean(x^2) + eps) * gamma), rounded to T as a norm kernel's output would be, into `staged` (M * chunks
// 16-byte chunks; null: none) and the chunks c of `out` with c % stride == offset (null: none). Two passes over x
// (re-read from L1 / L2): the sums of (x - s) and (x - s)^2 with s the row's first value (a LayerNorm's variance
// without the cancellation of E[x^2] - E[x]^2 where the mean is large against the spread), then the norm.
template <typename T, int M, int Threads, int Norm>
__device__ void normalize(const uint4* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                          float eps, int chunks, uint4* staged, uint4* __restrict__ out, int stride, int offset) {
  constexpr int kCount = Pack<T>::kCount;
  __shared__ float scratch[Threads / 32][2 * M];
  float shift[M], sums[2 * M], f[kCount];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    shift[m] = Norm == kLinearLayerNorm ? as_float(reinterpret_cast<const T*>(x + static_cast<size_t>(m) * chunks)[0])
                                        : 0.f;
    sums[2 * m] = sums[2 * m + 1] = 0.f;
  }
#pragma unroll 4
  for (int c = threadIdx.x; c < chunks; c += Threads)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      unpack<T>(__ldca(x + static_cast<size_t>(m) * chunks + c), f);
#pragma unroll
      for (int i = 0; i < kCount; ++i) {
        const float d = f[i] - shift[m];
        sums[2 * m] += d;
        sums[2 * m + 1] = fmaf(d, d, sums[2 * m + 1]);
      }
    }
  block_sum<2 * M, Threads>(sums, scratch);
  const float width = static_cast<float>(chunks * kCount);
  float mean[M], rstd[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float d = sums[2 * m] / width;  // mean - shift
    mean[m] = shift[m] + d;
    rstd[m] = rsqrtf(fmaxf(sums[2 * m + 1] / width - (Norm == kLinearLayerNorm ? d * d : 0.f), 0.f) + eps);
  }
  const uint4* g = reinterpret_cast<const uint4*>(gamma);
  const uint4* b = reinterpret_cast<const uint4*>(beta);
#pragma unroll 2
  for (int c = threadIdx.x; c < chunks; c += Threads) {
    float gf[kCount], bf[kCount];
    unpack<T>(__ldg(g + c), gf);
    if (beta) unpack<T>(__ldg(b + c), bf);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      unpack<T>(__ldca(x + static_cast<size_t>(m) * chunks + c), f);
#pragma unroll
      for (int i = 0; i < kCount; ++i) {
        const float centred = Norm == kLinearLayerNorm ? f[i] - mean[m] : f[i];
        f[i] = centred * rstd[m] * gf[i] + (beta ? bf[i] : 0.f);
      }
      const uint4 chunk = pack<T>(f);
      if (staged) staged[m * chunks + c] = chunk;
      if (out && c % stride == offset) out[static_cast<size_t>(m) * chunks + c] = chunk;
    }
  }
  __syncthreads();
}

// The epilogue both kernels of ours share, from a dot product's fp32 sum: y [m, col] = alpha * dot + bias[col] +
// addend[m, col] (either null: 0), then ReLU if asked; or, for a gated activation, y [m, col / 2] = act(alpha * gate
// + bias[col]) * (alpha * up + bias[col + 1]) with col even (weight rows col and col + 1 the gate and up pair)
template <typename T>
__device__ __forceinline__ void store_output(T* y, const T* bias, const T* addend, int n, int m, int col, float dot,
                                             float alpha, int activation) {
  const size_t at = static_cast<size_t>(m) * n + col;
  const float sum = alpha * dot + (bias ? as_float(bias[col]) : 0.f);
  const float v = sum + (addend ? as_float(__ldca(addend + at)) : 0.f);
  store(y + at, activation == kLinearRelu ? fmaxf(v, 0.f) : v);
}
template <typename T>
__device__ __forceinline__ void store_gated(T* y, const T* bias, int n, int m, int col, float gate, float up,
                                            float alpha, int activation) {
  gate = alpha * gate + (bias ? as_float(bias[col]) : 0.f);
  up = alpha * up + (bias ? as_float(bias[col + 1]) : 0.f);
  store(y + static_cast<size_t>(m) * (n / 2) + col / 2, gated(activation, gate) * up);
}

// x [M, k], w [n, k], bias [n] or null, y [M, n]; k a multiple of Pack<T>::kCount. A block of `Threads` threads
// takes `Rows` weight rows: each pass over the features loads `Ahead` 16-byte chunks of each row a thread (all
// issued before any is used) and the same chunks of x once for all `Rows` rows; the threads' fp32 sums are reduced
// through warp shuffles and shared memory at the end. With a `Norm`, x's rows are normalised into shared memory
// first (`normalize`) and the product reads them there.
struct NormArgs {
  const void* gamma;  // [k]
  const void* beta;   // [k] or null
  void* out;          // [M, k]: the normalised rows, or null
  float eps;
};

template <typename T, int M, int Rows, int Threads, int Ahead, int Norm>
__global__ void __launch_bounds__(Threads) few_rows(const T* __restrict__ x, const T* __restrict__ w,
                                                   const T* __restrict__ bias, const T* __restrict__ addend,
                                                   T* __restrict__ y, int n, int k, float alpha, int activation,
                                                   NormArgs norm) {
  constexpr int kPass = Threads * Ahead;  // chunks of a row one pass reads
  const int first = blockIdx.x * Rows;
  const int chunks = k / Pack<T>::kCount;
  const uint4* wr[Rows];
#pragma unroll
  for (int r = 0; r < Rows; ++r)
    wr[r] = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(first + r < n ? first + r : n - 1) * chunks;
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  extern __shared__ uint4 staged[];  // [M, chunks] with a norm
  uint4 now[Rows][Ahead];
#pragma unroll
  for (int r = 0; r < Rows; ++r)
#pragma unroll
    for (int a = 0; a < Ahead; ++a) {
      const int c = threadIdx.x + a * Threads;
      now[r][a] = c < chunks ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");  // x is the kernel before's output
#endif
  if (Norm != kLinearNoNorm) {
    normalize<T, M, Threads, Norm>(xr, static_cast<const T*>(norm.gamma), static_cast<const T*>(norm.beta), norm.eps,
                                   chunks, staged, static_cast<uint4*>(norm.out), gridDim.x, blockIdx.x);
    xr = staged;
  }
  float acc[M][Rows];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < Rows; ++r) acc[m][r] = 0.f;
  for (int base = 0; base < chunks; base += kPass) {
#pragma unroll
    for (int a = 0; a < Ahead; ++a) {
      const int c = base + a * Threads + threadIdx.x;
      if (c < chunks) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4 xv =
              Norm != kLinearNoNorm ? xr[m * chunks + c] : __ldca(xr + static_cast<size_t>(m) * chunks + c);
#pragma unroll
          for (int r = 0; r < Rows; ++r) Pack<T>::add(now[r][a], xv, acc[m][r]);
        }
      }
    }
    if (base + kPass < chunks) {
#pragma unroll
      for (int r = 0; r < Rows; ++r)
#pragma unroll
        for (int a = 0; a < Ahead; ++a) {
          const int c = base + kPass + a * Threads + threadIdx.x;
          now[r][a] = c < chunks ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
        }
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  constexpr int kWarpsHere = Threads / 32;
  __shared__ float partial[kWarpsHere][M * Rows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      float v = acc[m][r];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) partial[warp][m * Rows + r] = v;
    }
  __syncthreads();
  if (activation >= kLinearSiluGated) {  // rows 2j and 2j + 1 are gate and up of output column j
    for (int i = threadIdx.x; i < M * Rows / 2; i += Threads) {
      const int m = i / (Rows / 2), r = 2 * (i % (Rows / 2));
      if (first + r + 1 < n) {
        float gate = 0.f, up = 0.f;
#pragma unroll
        for (int j = 0; j < kWarpsHere; ++j) {
          gate += partial[j][m * Rows + r];
          up += partial[j][m * Rows + r + 1];
        }
        store_gated(y, bias, n, m, first + r, gate, up, alpha, activation);
      }
    }
    return;
  }
  for (int i = threadIdx.x; i < M * Rows; i += Threads) {
    const int m = i / Rows, r = i % Rows;
    if (first + r < n) {
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kWarpsHere; ++j) sum += partial[j][i];
      store_output(y, bias, addend, n, m, first + r, sum, alpha, activation);
    }
  }
}

// One 16 x 8 x 16 tensor-core product (fp16 in, fp32 sums): c += a . b, a 16 weight rows by 16 features, b 16
// features by 8 rows of x, in the registers of a warp as mma.sync lays them out
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // never launched there (dot_rows_on)
#endif
}

// chunk *= by, 8 fp16 values each (gamma's on a chunk of weights)
__device__ __forceinline__ void scale(uint4& chunk, const uint4& by) {
  __half2* v = reinterpret_cast<__half2*>(&chunk);
  const __half2* s = reinterpret_cast<const __half2*>(&by);
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = __hmul2(v[i], s[i]);
}

// sum += the squares of a chunk's 8 fp16 values, in fp32
__device__ __forceinline__ void add_squares(const uint4& chunk, float& sum) {
  const __half2* v = reinterpret_cast<const __half2*>(&chunk);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(v[i]);
    sum = fmaf(f.x, f.x, fmaf(f.y, f.y, sum));
  }
}

// out's chunks c with c % gridDim.x == blockIdx.x of x [rows, chunks] (fp16) normalised: x * rstd[m] * gamma,
// rounded once, as `normalize` writes an RMSNorm
__device__ void normalized_rows(const uint4* x, const uint4* gamma, const float* rstd, uint4* out, int rows,
                                int chunks) {
  const int blocks = gridDim.x, block = blockIdx.x;
  const int mine = (chunks - block + blocks - 1) / blocks;
  for (int i = threadIdx.x; i < rows * mine; i += blockDim.x) {
    const int m = i / mine, c = block + (i % mine) * blocks;
    const size_t at = static_cast<size_t>(m) * chunks + c;
    float f[8], gf[8];
    unpack<__half>(__ldca(x + at), f);
    unpack<__half>(__ldg(gamma + c), gf);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = f[e] * rstd[m] * gf[e];
    out[at] = pack<__half>(f);
  }
}

// x [rows, k] (3 <= rows <= 8 * Tiles), w [n, k], y [rows, n]; fp16, k a multiple of 8. The few-row kernel's
// design on the tensor cores: a block of `Warps` warps takes 16 weight rows, each warp a share of the features
// (steps of 32, interleaved), with `Ahead` steps of its loads in flight (each slot reloaded as it is used). In a
// step, lane (g, t) (g = lane / 4, t = lane % 4) loads features 8t..8t+7 of weight rows g and g + 8 and of x's rows
// g (and g + 8 with two tiles), 16 bytes each: two m16n8k16 products take them as their features 2t, 2t+1, 2t+8,
// 2t+9 (a sum over features does not depend on their order, as long as both operands agree on it). The warps'
// sums meet in shared memory; the epilogue is the few-row kernel's (bias, addend, ReLU or a gate of row pairs).
// With `Rms`, an RMSNorm of x comes first without a pass of its own: norm(x) . w_j = rstd * (x . (gamma * w_j)),
// so the weights' chunks are scaled by gamma's as they arrive (gamma * w stays in fp16's range where a raw x * gamma
// might not), the sums of x^2 gather from the same loads of x as the products, and the epilogue scales each row's
// sums by its rstd; the normalised rows are then written out too (spread over the blocks), for other readers.
// (Normalising x before the loop in every block, as the few-row kernel does, cost a flan-T5-XL step of 8 rows
// 0.47 ms on an H100: each block read all 8 rows twice before its first product. A LayerNorm, whose mean would
// need a second sum of gamma * w, is a kernel of its own before this one.) With 16 warps (512 threads, at most 128
// registers a thread) gamma's chunks are read from L1 as they are used, not held in flight with the weights'.
template <int Tiles, int Warps, int Ahead, bool Rms>
__global__ void __launch_bounds__(Warps * 32) dot_rows(const __half* __restrict__ x, const __half* __restrict__ w,
                                                       const __half* __restrict__ bias,
                                                       const __half* __restrict__ addend, __half* __restrict__ y,
                                                       int rows, int n, int k, float alpha, int activation,
                                                       NormArgs norm) {
  constexpr int M = 8 * Tiles;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int first = blockIdx.x * 16;
  const int chunks = k / 8;
  const int steps = (chunks + 3) / 4;
  const int mine = steps > warp ? (steps - warp + Warps - 1) / Warps : 0;  // steps warp, warp + Warps, ...
  const uint4* lo = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(min(first + g, n - 1)) * chunks;
  const uint4* hi = reinterpret_cast<const uint4*>(w) + static_cast<size_t>(min(first + g + 8, n - 1)) * chunks;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const uint4* gamma = reinterpret_cast<const uint4*>(norm.gamma);
  constexpr bool kGammaAhead = Rms && Warps < 16;  // gamma's chunks held in flight (else read from L1 at use)
  uint4 wl[Ahead], wh[Ahead], gs[kGammaAhead ? Ahead : 1];
#pragma unroll
  for (int a = 0; a < Ahead; ++a) {
    const int c = (warp + a * Warps) * 4 + t;
    const bool in = a < mine && c < chunks;
    wl[a] = in ? __ldcs(lo + c) : zero;
    wh[a] = in ? __ldcs(hi + c) : zero;
    if (kGammaAhead) gs[a] = in ? __ldg(gamma + c) : zero;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");  // x is the kernel before's output
#endif
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  // x's chunks of step i of this warp's (rows g and g + 8 with two tiles), loaded with its weights' (so no step
  // waits on a load of its own)
  const auto load_x = [&](int i, uint4 (&into)[Tiles]) {
    const int c = (warp + i * Warps) * 4 + t;
#pragma unroll
    for (int j = 0; j < Tiles; ++j) {
      const int m = g + 8 * j;
      into[j] = i < mine && m < rows && c < chunks ? __ldca(xr + static_cast<size_t>(m) * chunks + c) : zero;
    }
  };
  uint4 xs[Ahead][Tiles];
#pragma unroll
  for (int a = 0; a < Ahead; ++a) load_x(a, xs[a]);
  float acc[Tiles][4], squares[Tiles];  // squares: this lane's sum of x^2 over its chunks of row g + 8j
#pragma unroll
  for (int j = 0; j < Tiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = squares[j] = 0.f;
  for (int i = 0; i < mine; i += Ahead) {
#pragma unroll
    for (int a = 0; a < Ahead; ++a) {
      if (i + a < mine) {
        if (Rms) {
          const int c = (warp + (i + a) * Warps) * 4 + t;
          const uint4 by = kGammaAhead ? gs[a] : c < chunks ? __ldg(gamma + c) : zero;
          scale(wl[a], by);
          scale(wh[a], by);
#pragma unroll
          for (int j = 0; j < Tiles; ++j) add_squares(xs[a][j], squares[j]);
        }
#pragma unroll
        for (int j = 0; j < Tiles; ++j) {
          mma16816(acc[j], wl[a].x, wh[a].x, wl[a].y, wh[a].y, xs[a][j].x, xs[a][j].y);
          mma16816(acc[j], wl[a].z, wh[a].z, wl[a].w, wh[a].w, xs[a][j].z, xs[a][j].w);
        }
        const int next = (warp + (i + a + Ahead) * Warps) * 4 + t;
        const bool in = i + a + Ahead < mine && next < chunks;
        wl[a] = in ? __ldcs(lo + next) : zero;
        wh[a] = in ? __ldcs(hi + next) : zero;
        if (kGammaAhead) gs[a] = in ? __ldg(gamma + next) : zero;
        load_x(i + a + Ahead, xs[a]);
      }
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  __shared__ float partial[Warps][16][M];  // [warp][weight row][row of x]
#pragma unroll
  for (int j = 0; j < Tiles; ++j) {
    partial[warp][g][8 * j + 2 * t] = acc[j][0];
    partial[warp][g][8 * j + 2 * t + 1] = acc[j][1];
    partial[warp][g + 8][8 * j + 2 * t] = acc[j][2];
    partial[warp][g + 8][8 * j + 2 * t + 1] = acc[j][3];
  }
  __shared__ float rstd[Rms ? Warps : 1][M];  // with an RMSNorm: the warps' sums of x^2, then each row's rstd
  if (Rms) {
#pragma unroll
    for (int j = 0; j < Tiles; ++j) {
      squares[j] += __shfl_xor_sync(0xffffffffu, squares[j], 1);
      squares[j] += __shfl_xor_sync(0xffffffffu, squares[j], 2);
      if (t == 0) rstd[warp][g + 8 * j] = squares[j];
    }
  }
  __syncthreads();
  if (Rms) {
    if (threadIdx.x < M) {
      float v = 0.f;
#pragma unroll
      for (int j = 0; j < Warps; ++j) v += rstd[j][threadIdx.x];
      rstd[0][threadIdx.x] = rsqrtf(v / static_cast<float>(k) + norm.eps);  // RMSNorm's as `normalize` has it
    }
    __syncthreads();
    normalized_rows(reinterpret_cast<const uint4*>(x), gamma, rstd[0], static_cast<uint4*>(norm.out), rows, chunks);
  }
  const auto sum = [&](int r, int m) {
    float v = 0.f;
#pragma unroll
    for (int j = 0; j < Warps; ++j) v += partial[j][r][m];
    return Rms ? v * rstd[0][m] : v;
  };
  if (activation >= kLinearSiluGated) {  // rows 2j and 2j + 1 are gate and up of output column j
    for (int i = threadIdx.x; i < 8 * rows; i += Warps * 32) {
      const int m = i / 8, r = 2 * (i % 8);
      if (first + r + 1 < n) store_gated(y, bias, n, m, first + r, sum(r, m), sum(r + 1, m), alpha, activation);
    }
    return;
  }
  for (int i = threadIdx.x; i < 16 * rows; i += Warps * 32) {
    const int m = i / 16, r = i % 16;
    if (first + r < n) store_output(y, bias, addend, n, m, first + r, sum(r, m), alpha, activation);
  }
}

// y [rows, n] = y + bias + addend (either null: 0), then ReLU if asked: cuBLAS's product's epilogue
template <typename T>
__global__ void epilogue(T* y, const T* bias, const T* addend, size_t total, int n, int activation) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = as_float(y[i]) + (bias ? as_float(bias[i % n]) : 0.f) + (addend ? as_float(addend[i]) : 0.f);
    store(y + i, activation == kLinearRelu ? fmaxf(v, 0.f) : v);
  }
}

// y [rows, n / 2] = act(product[:, 2j] + bias[2j]) * (product[:, 2j + 1] + bias[2j + 1]): a gated activation after
// cuBLAS's product [rows, n] of interleaved gate and up rows
template <typename T>
__global__ void gated_epilogue(T* y, const T* product, const T* bias, size_t total, int n, int activation) {
  const int half = n / 2;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / half;
    const int j = static_cast<int>(i % half);
    const T* p = product + row * n + 2 * j;
    const float gate = as_float(p[0]) + (bias ? as_float(bias[2 * j]) : 0.f);
    const float up = as_float(p[1]) + (bias ? as_float(bias[2 * j + 1]) : 0.f);
    store(y + i, gated(activation, gate) * up);
  }
}

// out [rows, k] = the norm of x [rows, k], a block a row: the norm before cuBLAS's product, or before the few-row
// kernel where x's rows do not fit its shared memory
template <typename T, int Norm>
__global__ void norm_rows(const T* x, NormArgs norm, int k) {
  const int chunks = k / Pack<T>::kCount;
  const size_t row = static_cast<size_t>(blockIdx.x) * chunks;
  normalize<T, 1, 256, Norm>(reinterpret_cast<const uint4*>(x) + row, static_cast<const T*>(norm.gamma),
                             static_cast<const T*>(norm.beta), norm.eps, chunks, nullptr,
                             static_cast<uint4*>(norm.out) + row, 1, 0);
}

bool programmatic_launch() {  // read at every launch (a captured graph keeps what it was captured with)
  return !env_starts("NNDF_ORT_LINEAR_PDL", '0');
}

// A value of the current device (`ask(device)`, positive), asked of the runtime once per device and kept in `known`
// (0: not asked yet); `fallback` where the device or the value cannot be had
constexpr int kDevices = 64;
template <typename Ask>
int per_device(std::atomic<int> (&known)[kDevices], Ask ask, int fallback) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) return fallback;
  int value = device < kDevices ? known[device].load(std::memory_order_relaxed) : 0;
  if (value > 0) return value;
  value = ask(device);
  if (value <= 0) return fallback;
  if (device < kDevices) known[device].store(value, std::memory_order_relaxed);
  return value;
}

int device_attribute(cudaDeviceAttr attribute, int device) {
  int value = 0;
  return cudaDeviceGetAttribute(&value, attribute, device) == cudaSuccess ? value : 0;
}

// the current device's compute capability (major) and multiprocessors
int compute_major() {
  static std::atomic<int> known[kDevices];
  return per_device(known, [](int d) { return device_attribute(cudaDevAttrComputeCapabilityMajor, d); }, 0);
}
int multiprocessors() {
  static std::atomic<int> known[kDevices];
  return per_device(known, [](int d) { return device_attribute(cudaDevAttrMultiProcessorCount, d); }, 0);
}

// the tensor-core kernel for 3-16 fp16 rows on a GPU with mma.sync's fp16 form (compute capability 8.0 and later),
// unless NNDF_ORT_LINEAR_DOT=0 (read at every launch, for measurements) sends them to cuBLAS as for more rows
bool dot_rows_on() {
  return !env_starts("NNDF_ORT_LINEAR_DOT", '0') && compute_major() >= 8;
}

// an RMSNorm before 3-16 fp16 rows inside the tensor-core kernel (the default), or a kernel of its own before it
// (NNDF_ORT_LINEAR_RMS_IN_DOT=0, read at every launch, for measurements)
bool rms_in_products() {
  return !env_starts("NNDF_ORT_LINEAR_RMS_IN_DOT", '0');
}

// loads of each weight row in flight a thread before a normalising block's norm: 1 (the default), or 4 (with 128
// threads, a 4096-feature fp16 row's every load issued before the block waits and normalises);
// NNDF_ORT_LINEAR_NORM_AHEAD=4, read at every launch, for measurements
bool norm_ahead() {
  return env_starts("NNDF_ORT_LINEAR_NORM_AHEAD", '4');
}

template <typename T, int M, int Rows, int Threads, int Ahead, int Norm>
cudaError_t launch_few(const void* x, const void* w, const void* bias, const void* addend, void* y, int n, int k,
                       float alpha, int activation, const NormArgs& norm, cudaStream_t stream) {
  const size_t shared = Norm != kLinearNoNorm ? static_cast<size_t>(M) * k * sizeof(T) : 0;
  return launch_programmatic(programmatic_launch(), few_rows<T, M, Rows, Threads, Ahead, Norm>,
                             dim3((n + Rows - 1) / Rows), dim3(Threads), shared, stream, static_cast<const T*>(x),
                             static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<const T*>(addend),
                             static_cast<T*>(y), n, k, alpha, activation, norm);
}

// One and two rows: blocks of 128 threads over 4 weight rows, one 16-byte load of each row a thread per pass.
// Kernel alone, reading a chain of products from ONNX Runtime's CUDA graph on an H100, us a product at one row
// against cuBLAS's (ONNX Runtime's MatMul): 4096x4096 13.0 / 13.7, 2048x2048 4.4 / 5.8, 4096x12288 35.9 / 36.2,
// 4096x16384 46.8 / 46.5; other tilings (4 rows x 64 threads x 2 loads, 2 x 64 x 4, 8 x 64 x 2, 4 x 64 x 4, one
// row a warp with 8 loads) were slower at 2048 and 12288 features. At 4 and 8 rows this form was slower than
// cuBLAS (16.0 / 13.5 and 18.8 / 13.5 us at 4096x4096), so from 3 rows cuBLAS takes the product
// (docs/device-runs/2026-12-06-h100-ort-linear).
template <typename T, int Norm>
cudaError_t dispatch_few(int rows, const void* x, const void* w, const void* b, const void* a, void* y, int n, int k,
                         float alpha, int activation, const NormArgs& norm, cudaStream_t s) {
  if (Norm != kLinearNoNorm && norm_ahead())
    return rows == 1 ? launch_few<T, 1, 4, 128, 4, Norm>(x, w, b, a, y, n, k, alpha, activation, norm, s)
                     : launch_few<T, 2, 4, 128, 4, Norm>(x, w, b, a, y, n, k, alpha, activation, norm, s);
  return rows == 1 ? launch_few<T, 1, 4, 128, 1, Norm>(x, w, b, a, y, n, k, alpha, activation, norm, s)
                   : launch_few<T, 2, 4, 128, 1, Norm>(x, w, b, a, y, n, k, alpha, activation, norm, s);
}

template <typename T>
cudaError_t dispatch_few(int rows, const void* x, const void* w, const void* b, const void* a, void* y, int n, int k,
                         float alpha, int activation, int norm_kind, const NormArgs& norm, cudaStream_t s) {
  switch (norm_kind) {
    case kLinearLayerNorm: return dispatch_few<T, kLinearLayerNorm>(rows, x, w, b, a, y, n, k, alpha, activation, norm, s);
    case kLinearRmsNorm: return dispatch_few<T, kLinearRmsNorm>(rows, x, w, b, a, y, n, k, alpha, activation, norm, s);
    default: return dispatch_few<T, kLinearNoNorm>(rows, x, w, b, a, y, n, k, alpha, activation, norm, s);
  }
}

// blocks of `Kernel` (`threads` threads) a multiprocessor of the current device holds at once, asked once per
// device and kernel
template <auto Kernel>
int resident_blocks(int threads) {
  static std::atomic<int> known[kDevices];
  return per_device(known, [threads](int) {
    int blocks = 0;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Kernel, threads, 0) == cudaSuccess ? blocks : 0;
  }, 1);
}

// Three to 16 rows in fp16: the tensor-core kernel, 16 weight rows a block, 8 steps of 32 features in flight a warp;
// 8 warps a block where all blocks are resident at once with 8 (so a narrow product has as many loads in flight as
// a wide one), else 4 (on an H100 at 8 rows, wall us a product: 4 warps everywhere 12.0 at 2048x2048, 8 warps 7.1,
// before x's loads went in flight with the weights'; a flan-T5-XL step of 8 rows 3.316 ms with 4 warps everywhere,
// 2.852 with 8 everywhere or 8 where narrow). NNDF_ORT_LINEAR_DOT_WARPS=4, 8 or 16 (16: up to 8 rows, 8 above),
// read at every launch, takes that many everywhere, for measurements.
template <int Tiles, bool Rms>
cudaError_t launch_dot(int rows, const void* x, const void* w, const void* b, const void* a, void* y, int n, int k,
                       float alpha, int activation, const NormArgs& norm, cudaStream_t s) {
  constexpr auto four = dot_rows<Tiles, 4, 8, Rms>, eight = dot_rows<Tiles, 8, 8, Rms>;
  constexpr auto sixteen = dot_rows<Tiles, Tiles == 1 ? 16 : 8, 8, Rms>;
  const int blocks = (n + 15) / 16;
  int warps = blocks <= resident_blocks<eight>(256) * multiprocessors() ? 8 : 4;
  const char* forced = getenv("NNDF_ORT_LINEAR_DOT_WARPS");
  if (forced && (!strcmp(forced, "4") || !strcmp(forced, "8") || !strcmp(forced, "16")))
    warps = forced[0] == '1' ? (Tiles == 1 ? 16 : 8) : atoi(forced);
  const auto kernel = warps == 16 ? sixteen : warps == 8 ? eight : four;
  return launch_programmatic(programmatic_launch(), kernel, dim3(blocks), dim3(warps * 32), 0, s,
                             static_cast<const __half*>(x), static_cast<const __half*>(w),
                             static_cast<const __half*>(b), static_cast<const __half*>(a), static_cast<__half*>(y),
                             rows, n, k, alpha, activation, norm);
}

template <bool Rms>
cudaError_t dispatch_dot(int rows, const void* x, const void* w, const void* b, const void* a, void* y, int n, int k,
                         float alpha, int activation, const NormArgs& norm, cudaStream_t s) {
  return rows <= 8 ? launch_dot<1, Rms>(rows, x, w, b, a, y, n, k, alpha, activation, norm, s)
                   : launch_dot<2, Rms>(rows, x, w, b, a, y, n, k, alpha, activation, norm, s);
}

template <typename T>
cudaError_t launch_norm(int rows, const void* x, int norm_kind, const NormArgs& norm, int k, cudaStream_t s) {
  if (norm_kind == kLinearLayerNorm)
    norm_rows<T, kLinearLayerNorm><<<rows, 256, 0, s>>>(static_cast<const T*>(x), norm, k);
  else
    norm_rows<T, kLinearRmsNorm><<<rows, 256, 0, s>>>(static_cast<const T*>(x), norm, k);
  return cudaGetLastError();
}

// cublasGemmEx, found in the cuBLAS library ONNX Runtime's CUDA provider already loaded (its handle is passed in)
using GemmEx = int (*)(void* handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* a,
                       int a_type, int lda, const void* b, int b_type, int ldb, const void* beta, void* c,
                       int c_type, int ldc, int compute_type, int algo);
constexpr size_t kStagedBytes = 48 * 1024;  // shared memory a block gets without opting in
constexpr int kOpN = 0, kOpT = 1, kR16F = 2, kR32F = 0, kCompute32F = 68, kGemmDefault = -1;

int find_cublas(struct dl_phdr_info* info, size_t, void* found) {
  const char* name = info->dlpi_name;
  const char* base = name ? strrchr(name, '/') : nullptr;
  base = base ? base + 1 : name;
  if (base && !strncmp(base, "libcublas.so", 12) && !*static_cast<void**>(found))
    *static_cast<void**>(found) = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
  return 0;
}

GemmEx gemm_ex() {
  static const GemmEx fn = [] {
    void* lib = nullptr;
    dl_iterate_phdr(find_cublas, &lib);  // the cuBLAS ONNX Runtime's CUDA provider loaded, wherever it came from
    for (const char* name : {"libcublas.so.13", "libcublas.so.12"})
      if (!lib) lib = dlopen(name, RTLD_NOW);
    return lib ? reinterpret_cast<GemmEx>(dlsym(lib, "cublasGemmEx")) : static_cast<GemmEx>(nullptr);
  }();
  return fn;
}

// The launcher for element type T (__half or float): the few-row kernel (1-2 rows), the tensor-core kernel (3-16
// rows, fp16), else cuBLAS and an epilogue; the norm in a kernel of its own except where the few-row kernel takes
// the rows and they fit a block's shared memory, or the tensor-core kernel takes them and the norm is an RMSNorm.
template <typename T>
const char* linear(const void* x, const void* w, const void* bias, const void* addend, void* y, void* product,
                   int64_t rows, int64_t n, int64_t k, float alpha, int activation, const LinearNorm& norm,
                   cudaStream_t stream, void* cublas) {
  constexpr int kPack = Pack<T>::kCount;
  const bool gate = activation >= kLinearSiluGated;
  const size_t staged = static_cast<size_t>(rows) * k * sizeof(T);  // the normalised rows in shared memory
  cudaError_t status = cudaSuccess;
  if (norm.kind != kLinearNoNorm && k % kPack) return "nndf Linear: a norm needs a width that is a multiple of 8";
  NormArgs args{norm.gamma, norm.beta, norm.out, norm.eps};
  int norm_kind = norm.kind;
  const bool few = rows <= kLinearFewRows && k % kPack == 0;
  const bool dot =
      sizeof(T) == 2 && rows > kLinearFewRows && rows <= kLinearDotRows && k % kPack == 0 && dot_rows_on();
  const bool rms_in_dot = dot && norm_kind == kLinearRmsNorm && rms_in_products();
  if (norm_kind != kLinearNoNorm && (!few || staged > kStagedBytes) && !rms_in_dot) {
    // the norm in its own kernel, then the product reads its output
    status = launch_norm<T>(static_cast<int>(rows), x, norm_kind, args, static_cast<int>(k), stream);
    if (status != cudaSuccess) return cudaGetErrorString(status);
    x = norm.out;
    norm_kind = kLinearNoNorm;
  }
  if (few) {
    status = dispatch_few<T>(static_cast<int>(rows), x, w, bias, addend, y, static_cast<int>(n), static_cast<int>(k),
                             alpha, activation, norm_kind, args, stream);
    return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
  }
  if constexpr (sizeof(T) == 2) {
    if (dot) {
      const auto launch = norm_kind == kLinearRmsNorm ? dispatch_dot<true> : dispatch_dot<false>;
      status = launch(static_cast<int>(rows), x, w, bias, addend, y, static_cast<int>(n), static_cast<int>(k), alpha,
                      activation, args, stream);
      return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
    }
  }
  GemmEx gemm = gemm_ex();
  if (!gemm || !cublas) return "nndf Linear: cuBLAS (cublasGemmEx) is not loaded in this process";
  if (gate && !product) return "nndf Linear: a gated activation needs the product's buffer P";
  // row-major out [rows, n] = x [rows, k] . w^T is column-major out^T [n, rows] = w^T' [n, k] . x^T [k, rows]
  const float zero = 0.f;
  const int type = sizeof(T) == 2 ? kR16F : kR32F;
  void* out = gate ? product : y;
  if (gemm(cublas, kOpT, kOpN, static_cast<int>(n), static_cast<int>(rows), static_cast<int>(k), &alpha, w, type,
           static_cast<int>(k), x, type, static_cast<int>(k), &zero, out, type, static_cast<int>(n), kCompute32F,
           kGemmDefault) != 0)
    return "nndf Linear: cublasGemmEx failed";
  const size_t total = static_cast<size_t>(rows) * (gate ? n / 2 : n);
  const int blocks = static_cast<int>((total + 255) / 256 < 65535 ? (total + 255) / 256 : 65535);
  if (gate)
    gated_epilogue<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(product),
                                                  static_cast<const T*>(bias), total, static_cast<int>(n), activation);
  else if (bias || addend || activation)
    epilogue<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(bias),
                                            static_cast<const T*>(addend), total, static_cast<int>(n), activation);
  else
    return nullptr;  // no kernel after cuBLAS's
  status = cudaGetLastError();
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

}  // namespace

const char* nndf_linear_cuda(int dtype, const void* x, const void* w, const void* bias, const void* addend, void* y,
                             void* product, int64_t rows, int64_t n, int64_t k, float alpha, int activation,
                             const LinearNorm& norm, void* stream_handle, void* cublas) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  return dtype == kLinearFloat16
             ? linear<__half>(x, w, bias, addend, y, product, rows, n, k, alpha, activation, norm, stream, cublas)
             : linear<float>(x, w, bias, addend, y, product, rows, n, k, alpha, activation, norm, stream, cublas);
}
