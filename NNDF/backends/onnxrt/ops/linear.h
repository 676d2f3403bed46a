// The Linear op's kernels: the CPU reference (ops.cc) and the GPU launcher (linear.cu).
#pragma once
#include <stdint.h>

constexpr int kLinearFloat32 = 1;   // ONNX's element types
constexpr int kLinearFloat16 = 10;
constexpr int64_t kLinearFewRows = 2;   // rows of x this library's few-row kernel takes
constexpr int64_t kLinearDotRows = 16;  // rows its tensor-core kernel takes in fp16 (more: cuBLAS)
constexpr int kLinearNoNorm = 0, kLinearLayerNorm = 1, kLinearRmsNorm = 2;  // the op's `norm` attribute
// the op's `activation` attribute: none, ReLU, and the gated ones (W's rows 2j and 2j + 1 are the gate and the up
// projection of output column j: Y [..., n / 2] = act(gate) * up) with SiLU or GELU's tanh form as act
constexpr int kLinearNoActivation = 0, kLinearRelu = 1, kLinearSiluGated = 2, kLinearGeluGated = 3;

// A norm over each row of x applied before the product: LayerNorm ((x - mean) / sqrt(var + eps) * gamma + beta)
// or RMSNorm (x / sqrt(mean(x^2) + eps) * gamma); the normalised rows are written to `out` ([rows, k]).
struct LinearNorm {
  int kind = kLinearNoNorm;
  const void* gamma = nullptr;  // [k]
  const void* beta = nullptr;   // [k], or null (RMSNorm, or a LayerNorm without one)
  void* out = nullptr;          // [rows, k]
  float eps = 0.f;
};

// y [rows, n] = alpha * norm(x) [rows, k] . w [n, k]^T (+ bias [n]) (+ addend [rows, n]), then `activation` (a
// gated one: y [rows, n / 2], with `product` [rows, n] for cuBLAS's product before it), on `stream` (a
// cudaStream_t); `cublas` is ONNX Runtime's cuBLAS handle for that stream. Returns null, or what failed.
const char* nndf_linear_cuda(int dtype, const void* x, const void* w, const void* bias, const void* addend, void* y,
                             void* product, int64_t rows, int64_t n, int64_t k, float alpha, int activation,
                             const LinearNorm& norm, void* stream, void* cublas);
