// ONNX Runtime custom ops of this project, domain "nndf", loaded with SessionOptions.register_custom_ops_library.
//
// Linear(X [..., k], W [n, k], B [n]?, A [..., n]?, G [k]?, H [k]?) -> Y [..., n], N [..., k]?, P [..., n]?:
//   N = norm(X) (norm=1: LayerNorm with scale G and bias H; norm=2: RMSNorm with scale G; epsilon), else N = X;
//   P = alpha * N . W^T + B + A; Y = P, or ReLU(P) with activation=1, or with a gated activation (2: SiLU, 3:
//   GELU's tanh form; W's rows 2j and 2j + 1 the gate and the up projection of column j, no A)
//   Y [..., n / 2] = act(P[..., 2j]) * P[..., 2j + 1].
// A checkpoint's nn.Linear as it is stored, the norm before it and a tensor of the output's shape added (a
// residual) in the same kernel (attributes: alpha, float, default 1; activation, int, 0-3; norm, int, 0, 1 or 2;
// epsilon, float). N, the normalised X, is written where the node names it (it must with a norm); P, where the
// node names it (it must with a gated activation: cuBLAS's product of many rows goes there before the gate). On
// CUDA (float16, float32) a few rows of X go to this library's kernels (linear.cu: 1-2 rows, and 3-16 float16 rows
// on the tensor cores), more to cuBLAS through ONNX Runtime's handle; on the CPU (float32) a plain loop, there to
// check a graph that uses the op against ONNX Runtime's own ops.
//
// Attention(Q, K?, V?, past_key, past_value, seqlens_k?, bias?, key_bias?) -> Y, present_key?, present_value?,
// workspace?:
//   Q [B, S, heads * D] (or packed [B, S, (heads + 2 kv_heads) * D] with K and V left out), K / V [B, S,
//   kv_heads * D], past_key / past_value [B, kv_heads, L, D] (the cache; bound as the presents too, it is written
//   in place, else copied into them first), seqlens_k int32 [B] (each row's total length - 1: its S new tokens go
//   to columns seqlens_k - S + 1 ..), bias [2R + 1, heads] (added to the score of key column c for the query at
//   column q: row clip(c - q, -R, R) + R; optional), key_bias [B, L] (added to every score of row b's column c;
//   optional). Query s of a row sees the columns up to its own (causal), its last local_window_size of them where
//   that attribute is positive. causal=0 (cross-attention): Q [B, S, heads * D] over every column of the cache,
//   which is only read (no K, V, seqlens_k, position bias or presents). Attributes: num_heads, kv_num_heads
//   (default num_heads; each kv head serves num_heads / kv_num_heads query heads), scale (default 1 / sqrt(D)),
//   local_window_size, causal (default 1). The scores in fp32. On CUDA (float16; attention.cu) the fourth output,
//   a float32 workspace, must be named; on the CPU (float32) a plain loop.
#include <stdio.h>
#include <string.h>

#include <vector>

#include "attention.h"
#include "linear.h"
#include "ort_abi.h"

namespace {

const OrtApi* g_api = nullptr;
constexpr int kInt32 = 6;  // ONNX's element type

OrtStatus* fail(const char* message) {
  return ort_fn<OrtStatus* (*)(int, const char*)>(g_api, kCreateStatus)(kOrtInvalidArgument, message);
}

#define ORT_TRY(expr)                       \
  do {                                      \
    if (OrtStatus* status_ = (expr)) return status_; \
  } while (0)

struct Tensor {
  int type = 0;
  std::vector<int64_t> dims;
  void* data = nullptr;
};

OrtStatus* read(const OrtValue* value, Tensor* out) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  ORT_TRY(ort_fn<OrtStatus* (*)(const OrtValue*, OrtTensorTypeAndShapeInfo**)>(g_api, kGetTensorTypeAndShape)(value, &info));
  size_t count = 0;
  OrtStatus* status = ort_fn<OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, int*)>(g_api, kGetTensorElementType)(info, &out->type);
  if (!status) status = ort_fn<OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, size_t*)>(g_api, kGetDimensionsCount)(info, &count);
  if (!status) {
    out->dims.resize(count);
    status = ort_fn<OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, int64_t*, size_t)>(g_api, kGetDimensions)(
        info, out->dims.data(), count);
  }
  ort_fn<void (*)(OrtTensorTypeAndShapeInfo*)>(g_api, kReleaseTensorTypeAndShapeInfo)(info);
  if (!status) status = ort_fn<OrtStatus* (*)(OrtValue*, void**)>(g_api, kGetTensorMutableData)(
      const_cast<OrtValue*>(value), &out->data);
  return status;
}

struct Op : OrtCustomOp {
  int dtype;       // ONNX element type of the op's tensors (the Attention op's seqlens_k and workspace excepted)
  const char* ep;  // null: the CPU provider
};

struct Kernel {
  bool cuda;
  float alpha;
  int activation;
  int norm;
  float eps;
};

// out [rows, k] = the norm (kLinearLayerNorm / kLinearRmsNorm) of x [rows, k]; beta may be null
void cpu_norm(const float* x, const float* gamma, const float* beta, float* out, int64_t rows, int64_t k, int kind,
              float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    double mean = 0., var = 0.;
    if (kind == kLinearLayerNorm) {
      for (int64_t i = 0; i < k; ++i) mean += xr[i];
      mean /= static_cast<double>(k);
    }
    for (int64_t i = 0; i < k; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double rstd = 1. / __builtin_sqrt(var / static_cast<double>(k) + eps);
    for (int64_t i = 0; i < k; ++i)
      out[r * k + i] = static_cast<float>((xr[i] - mean) * rstd * gamma[i] + (beta ? beta[i] : 0.f));
  }
}

void cpu_linear(const float* x, const float* w, const float* b, const float* a, float* y, int64_t rows, int64_t n,
                int64_t k, float alpha, int relu) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const float* xr = x + r * k;
      const float* wr = w + j * k;
      float sum = 0.f;
      for (int64_t i = 0; i < k; ++i) sum += xr[i] * wr[i];
      sum = alpha * sum + (b ? b[j] : 0.f) + (a ? a[r * n + j] : 0.f);
      y[r * n + j] = relu && sum < 0.f ? 0.f : sum;
    }
}

// y [rows, n / 2] = act(product[:, 2j]) * product[:, 2j + 1] (act: SiLU, or GELU's tanh form)
void cpu_gate(const float* product, float* y, int64_t rows, int64_t n, int activation) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n / 2; ++j) {
      const float gate = product[r * n + 2 * j], up = product[r * n + 2 * j + 1];
      const float act = activation == kLinearSiluGated
                            ? gate / (1.f + __builtin_expf(-gate))
                            : 0.5f * gate * (1.f + __builtin_tanhf(0.7978845608028654f * (gate + 0.044715f * gate * gate * gate)));
      y[r * (n / 2) + j] = act * up;
    }
}

OrtStatus* compute(void* kernel, OrtKernelContext* context) {
  const Kernel& op = *static_cast<Kernel*>(kernel);
  size_t inputs = 0;
  ORT_TRY(ort_fn<OrtStatus* (*)(const OrtKernelContext*, size_t*)>(g_api, kKernelContextGetInputCount)(context, &inputs));
  auto input = ort_fn<OrtStatus* (*)(const OrtKernelContext*, size_t, const OrtValue**)>(g_api, kKernelContextGetInput);
  const OrtValue *xv = nullptr, *wv = nullptr, *bv = nullptr, *av = nullptr, *gv = nullptr, *hv = nullptr;
  ORT_TRY(input(context, 0, &xv));
  ORT_TRY(input(context, 1, &wv));
  if (inputs > 2) ORT_TRY(input(context, 2, &bv));
  if (inputs > 3) ORT_TRY(input(context, 3, &av));
  if (inputs > 4) ORT_TRY(input(context, 4, &gv));
  if (inputs > 5) ORT_TRY(input(context, 5, &hv));
  Tensor x, w, b, a, gamma, beta;
  ORT_TRY(read(xv, &x));
  ORT_TRY(read(wv, &w));
  if (bv) ORT_TRY(read(bv, &b));
  if (av) ORT_TRY(read(av, &a));
  if (gv) ORT_TRY(read(gv, &gamma));
  if (hv) ORT_TRY(read(hv, &beta));
  if (x.dims.empty() || w.dims.size() != 2 || x.dims.back() != w.dims[1] || (bv && (b.dims.size() != 1 || b.dims[0] != w.dims[0]))) {
    char message[256];
    snprintf(message, sizeof message, "nndf Linear: X [..., %lld], W [%lld, %lld] and B of %zu dims do not fit",
             x.dims.empty() ? -1LL : static_cast<long long>(x.dims.back()), w.dims.size() == 2 ? static_cast<long long>(w.dims[0]) : -1LL,
             w.dims.size() == 2 ? static_cast<long long>(w.dims[1]) : -1LL, b.dims.size());
    return fail(message);
  }
  const int64_t n = w.dims[0], k = w.dims[1];
  const std::vector<int64_t> width{k};
  if (op.norm && (!gv || gamma.dims != width || (hv && beta.dims != width)))
    return fail("nndf Linear: a norm needs its scale G (and bias H, if any) of X's width [k]");
  size_t outputs = 0;
  ORT_TRY(ort_fn<OrtStatus* (*)(const OrtKernelContext*, size_t*)>(g_api, kKernelContextGetOutputCount)(context, &outputs));
  const bool gate = op.activation >= kLinearSiluGated;
  if (gate && (n % 2 || av)) return fail("nndf Linear: a gated activation needs an even number of weight rows and no addend");
  if (gate && outputs < 3) return fail("nndf Linear: a gated activation needs the third output P (the product) named");
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.dims.size(); ++i) rows *= x.dims[i];
  std::vector<int64_t> dims = x.dims;
  dims.back() = n;
  if (av && a.dims != dims) return fail("nndf Linear: the addend A must have the output's shape [..., n]");
  auto output = ort_fn<OrtStatus* (*)(OrtKernelContext*, size_t, const int64_t*, size_t, OrtValue**)>(g_api, kKernelContextGetOutput);
  OrtValue *yv = nullptr, *nv = nullptr, *pv = nullptr;
  Tensor y, normed, product;
  if (gate) {
    ORT_TRY(output(context, 2, dims.data(), dims.size(), &pv));
    if (pv) ORT_TRY(read(pv, &product));
    dims.back() = n / 2;
  }
  ORT_TRY(output(context, 0, dims.data(), dims.size(), &yv));
  ORT_TRY(read(yv, &y));
  if (outputs > 1) ORT_TRY(output(context, 1, x.dims.data(), x.dims.size(), &nv));
  if (nv) ORT_TRY(read(nv, &normed));
  if (op.norm && !nv) return fail("nndf Linear: a norm needs the second output N (the normalised X) named");
  if (nv && !op.norm) return fail("nndf Linear: the second output N is the normalised X; the node has no norm");
  if (gate && !pv) return fail("nndf Linear: a gated activation needs the third output P (the product) named");
  if (rows == 0 || n == 0) return nullptr;
  LinearNorm norm;
  if (op.norm) norm = LinearNorm{op.norm, gamma.data, hv ? beta.data : nullptr, normed.data, op.eps};
#ifdef NNDF_CUDA
  if (op.cuda) {
    void* stream = nullptr;
    void* cublas = nullptr;
    ORT_TRY(ort_fn<OrtStatus* (*)(const OrtKernelContext*, void**)>(g_api, kKernelContextGetGPUComputeStream)(context, &stream));
    ORT_TRY(ort_fn<OrtStatus* (*)(const OrtKernelContext*, int, int, void**)>(g_api, kKernelContextGetResource)(
        context, kCudaResourceVersion, kCudaCublasHandle, &cublas));
    const char* error = nndf_linear_cuda(x.type, x.data, w.data, bv ? b.data : nullptr, av ? a.data : nullptr, y.data,
                                         product.data, rows, n, k, op.alpha, op.activation, norm, stream, cublas);
    return error ? fail(error) : nullptr;
  }
#endif
  if (op.cuda || x.type != kLinearFloat32) return fail("nndf Linear: this build has no kernel for this provider and type");
  if (op.norm) {
    cpu_norm(static_cast<const float*>(x.data), static_cast<const float*>(gamma.data),
             hv ? static_cast<const float*>(beta.data) : nullptr, static_cast<float*>(normed.data), rows, k, op.norm,
             op.eps);
    x.data = normed.data;
  }
  cpu_linear(static_cast<const float*>(x.data), static_cast<const float*>(w.data),
             bv ? static_cast<const float*>(b.data) : nullptr, av ? static_cast<const float*>(a.data) : nullptr,
             static_cast<float*>(gate ? product.data : y.data), rows, n, k, op.alpha, op.activation == kLinearRelu);
  if (gate) cpu_gate(static_cast<const float*>(product.data), static_cast<float*>(y.data), rows, n, op.activation);
  return nullptr;
}

// an attribute's value, or `fallback` where the node has none
template <typename V>
V attribute(const OrtKernelInfo* info, const char* name, V fallback, OrtSlot slot) {
  V value = fallback;
  if (OrtStatus* absent = ort_fn<OrtStatus* (*)(const OrtKernelInfo*, const char*, V*)>(g_api, slot)(info, name, &value)) {
    ort_fn<void (*)(OrtStatus*)>(g_api, kReleaseStatus)(absent);
    return fallback;
  }
  return value;
}

OrtStatus* create_kernel(const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info, void** kernel) {
  const int64_t activation = attribute<int64_t>(info, "activation", 0, kKernelInfoGetAttributeInt64);
  if (activation < kLinearNoActivation || activation > kLinearGeluGated)
    return fail("nndf Linear: activation is 0 (none), 1 (ReLU), 2 (SiLU-gated) or 3 (GELU-tanh-gated)");
  const int64_t norm = attribute<int64_t>(info, "norm", kLinearNoNorm, kKernelInfoGetAttributeInt64);
  if (norm != kLinearNoNorm && norm != kLinearLayerNorm && norm != kLinearRmsNorm)
    return fail("nndf Linear: norm is 0 (none), 1 (LayerNorm) or 2 (RMSNorm)");
  *kernel = new Kernel{static_cast<const Op*>(op)->ep != nullptr,
                       attribute<float>(info, "alpha", 1.f, kKernelInfoGetAttributeFloat), static_cast<int>(activation),
                       static_cast<int>(norm), attribute<float>(info, "epsilon", 1e-5f, kKernelInfoGetAttributeFloat)};
  return nullptr;
}

// The fields every op of this library sets alike: its element type and provider, inputs in the provider's memory,
// no variadic inputs or outputs.
Op base_op(int dtype, const char* ep) {
  Op op{};
  op.version = kOrtApiVersion;
  op.dtype = dtype;
  op.ep = ep;
  op.GetExecutionProviderType = [](const OrtCustomOp* self) { return static_cast<const Op*>(self)->ep; };
  op.GetInputMemoryType = [](const OrtCustomOp*, size_t) { return kMemTypeDefault; };
  op.GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  op.GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
  op.GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  op.GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
  return op;
}

Op linear_op(int dtype, const char* ep) {
  Op op = base_op(dtype, ep);
  op.GetName = [](const OrtCustomOp*) { return "Linear"; };
  op.GetInputType = [](const OrtCustomOp* self, size_t) { return static_cast<const Op*>(self)->dtype; };
  op.GetInputTypeCount = [](const OrtCustomOp*) { return size_t{6}; };
  op.GetOutputType = [](const OrtCustomOp* self, size_t) { return static_cast<const Op*>(self)->dtype; };
  op.GetOutputTypeCount = [](const OrtCustomOp*) { return size_t{3}; };
  op.KernelDestroy = [](void* kernel) { delete static_cast<Kernel*>(kernel); };
  op.GetInputCharacteristic = [](const OrtCustomOp*, size_t index) { return index >= 2 ? kInputOptional : kInputRequired; };
  op.GetOutputCharacteristic = [](const OrtCustomOp*, size_t index) { return index >= 1 ? kInputOptional : kInputRequired; };
  op.CreateKernelV2 = create_kernel;
  op.KernelComputeV2 = compute;
  return op;
}

struct AttentionKernel {
  bool cuda;
  int64_t heads, kv_heads, window;
  float scale;  // 0: 1 / sqrt(head size)
  bool causal;
};

// The CPU reference: the new keys and values written into the cache, then each query over its columns.
void cpu_attention(const AttentionArgs& a) {
  const int64_t d = a.head_dim, group = a.heads / a.kv_heads;
  const float* q = static_cast<const float*>(a.q);
  float* cache[2] = {static_cast<float*>(a.cache_k), static_cast<float*>(a.cache_v)};
  const float* fresh[2] = {static_cast<const float*>(a.k), static_cast<const float*>(a.v)};
  const float* bias = static_cast<const float*>(a.bias);
  const float* key_bias = static_cast<const float*>(a.key_bias);
  float* y = static_cast<float*>(a.y);
  std::vector<double> scores;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t total = a.causal ? static_cast<int64_t>(a.seqlens[b]) + 1 : a.length, from = total - a.seq;
    for (int64_t s = 0; s < a.seq && a.causal; ++s)
      for (int64_t j = 0; j < a.kv_heads && from + s >= 0 && from + s < a.length; ++j)
        for (int which = 0; which < 2; ++which)
          memcpy(cache[which] + ((b * a.kv_heads + j) * a.length + from + s) * d,
                 fresh[which] + (b * a.seq + s) * a.kv_stride + j * d, d * sizeof(float));
    for (int64_t s = 0; s < a.seq; ++s) {
      const int64_t column = from + s, end = !a.causal ? a.length : column + 1 < a.length ? column + 1 : a.length;
      const int64_t first = a.causal && a.window > 0 && column - a.window + 1 > 0 ? column - a.window + 1 : 0;
      for (int64_t h = 0; h < a.heads; ++h) {
        const float* qh = q + (b * a.seq + s) * a.q_stride + h * d;
        const int64_t j = h / group;
        scores.assign(end > first ? end - first : 0, 0.);
        double top = -1e300, sum = 0.;
        for (int64_t c = first; c < end; ++c) {
          const float* key = cache[0] + ((b * a.kv_heads + j) * a.length + c) * d;
          double dot = 0.;
          for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * key[i];
          dot *= a.scale;
          if (bias) {
            const int64_t r = c - column < -a.reach ? -a.reach : c - column > a.reach ? a.reach : c - column;
            dot += bias[(r + a.reach) * a.heads + h];
          }
          if (key_bias) dot += key_bias[b * a.length + c];
          scores[c - first] = dot;
          top = dot > top ? dot : top;
        }
        for (double& v : scores) sum += (v = __builtin_exp(v - top));
        float* out = y + (b * a.seq + s) * a.heads * d + h * d;
        for (int64_t i = 0; i < d; ++i) {
          double o = 0.;
          for (int64_t c = first; c < end; ++c)
            o += scores[c - first] * cache[1][((b * a.kv_heads + j) * a.length + c) * d + i];
          out[i] = sum > 0. ? static_cast<float>(o / sum) : 0.f;
        }
      }
    }
  }
}

OrtStatus* attention_compute(void* kernel, OrtKernelContext* context) {
  const AttentionKernel& op = *static_cast<AttentionKernel*>(kernel);
  size_t inputs = 0, outputs = 0;
  ORT_TRY(ort_fn<OrtStatus* (*)(const OrtKernelContext*, size_t*)>(g_api, kKernelContextGetInputCount)(context, &inputs));
  ORT_TRY(ort_fn<OrtStatus* (*)(const OrtKernelContext*, size_t*)>(g_api, kKernelContextGetOutputCount)(context, &outputs));
  auto input = ort_fn<OrtStatus* (*)(const OrtKernelContext*, size_t, const OrtValue**)>(g_api, kKernelContextGetInput);
  const OrtValue* values[8] = {};
  Tensor t[8];
  for (size_t i = 0; i < inputs && i < 8; ++i) {
    ORT_TRY(input(context, i, &values[i]));
    if (values[i]) ORT_TRY(read(values[i], &t[i]));
  }
  const Tensor &q = t[0], &k = t[1], &v = t[2], &past_k = t[3], &past_v = t[4], &seqlens = t[5], &bias = t[6];
  const Tensor& key_bias = t[7];
  const bool packed = op.causal && !values[1] && !values[2];
  if (!values[0] || !values[3] || !values[4] || (!values[1]) != (!values[2]))
    return fail("nndf Attention: needs Q, past_key and past_value, and K and V both or neither");
  if (op.causal ? !values[5] : values[1] || values[5] || values[6])
    return fail("nndf Attention: causal=1 needs seqlens_k; causal=0 (the cache read only) takes no K, V, seqlens_k "
                "or position bias");
  if (q.dims.size() != 3 || past_k.dims.size() != 4 || past_v.dims != past_k.dims || past_k.dims[0] != q.dims[0] ||
      past_k.dims[1] != op.kv_heads || (op.causal && (seqlens.dims.size() != 1 || seqlens.dims[0] != q.dims[0])))
    return fail("nndf Attention: Q [B, S, width], past_key / past_value [B, kv_num_heads, L, D] and seqlens_k [B] "
                "do not fit");
  AttentionArgs a;
  a.batch = q.dims[0];
  a.seq = q.dims[1];
  a.heads = op.heads;
  a.kv_heads = op.kv_heads;
  a.head_dim = past_k.dims[3];
  a.length = past_k.dims[2];
  a.window = op.window;
  a.causal = op.causal;
  a.scale = op.scale > 0.f ? op.scale : 1.f / __builtin_sqrtf(static_cast<float>(a.head_dim));
  const int64_t d = a.head_dim, kv_width = a.kv_heads * d;
  a.q_stride = q.dims[2];
  a.kv_stride = packed ? q.dims[2] : kv_width;
  if (packed ? q.dims[2] != (a.heads + 2 * a.kv_heads) * d
             : q.dims[2] != a.heads * d ||
                   (op.causal && (k.dims != std::vector<int64_t>{a.batch, a.seq, kv_width} || v.dims != k.dims)))
    return fail("nndf Attention: Q (or packed QKV), K and V do not fit num_heads, kv_num_heads and the cache's head "
                "size");
  const int elem = a.head_dim * (q.type == kLinearFloat16 ? 2 : 4);
  a.q = q.data;
  if (op.causal) {
    a.k = packed ? static_cast<const char*>(q.data) + a.heads * elem : k.data;
    a.v = packed ? static_cast<const char*>(q.data) + (a.heads + a.kv_heads) * elem : v.data;
    a.seqlens = static_cast<const int32_t*>(seqlens.data);
  }
  if (values[7]) {
    if (key_bias.dims != std::vector<int64_t>{a.batch, a.length})
      return fail("nndf Attention: the key bias is [B, L], the cache's batch and length");
    a.key_bias = key_bias.data;
  }
  if (values[6]) {
    if (bias.dims.size() != 2 || bias.dims[1] != a.heads || bias.dims[0] % 2 == 0)
      return fail("nndf Attention: the bias is [2R + 1, num_heads]");
    a.bias = bias.data;
    a.reach = (bias.dims[0] - 1) / 2;
  }
  auto output = ort_fn<OrtStatus* (*)(OrtKernelContext*, size_t, const int64_t*, size_t, OrtValue**)>(g_api, kKernelContextGetOutput);
  OrtValue *yv = nullptr, *kv = nullptr, *vv = nullptr, *wv = nullptr;
  const std::vector<int64_t> out_dims{a.batch, a.seq, a.heads * d};
  Tensor y, present_k, present_v, workspace;
  ORT_TRY(output(context, 0, out_dims.data(), 3, &yv));
  ORT_TRY(read(yv, &y));
  a.y = y.data;
  a.past_k = past_k.data;
  a.past_v = past_v.data;
  if (op.causal) {
    if (outputs < 3) return fail("nndf Attention: causal=1 needs present_key and present_value named");
    ORT_TRY(output(context, 1, past_k.dims.data(), 4, &kv));
    ORT_TRY(output(context, 2, past_k.dims.data(), 4, &vv));
    if (!kv || !vv) return fail("nndf Attention: causal=1 needs present_key and present_value named");
    ORT_TRY(read(kv, &present_k));
    ORT_TRY(read(vv, &present_v));
    a.cache_k = present_k.data;
    a.cache_v = present_v.data;
  } else {
    a.cache_k = const_cast<void*>(past_k.data);  // read only
    a.cache_v = const_cast<void*>(past_v.data);
  }
#ifdef NNDF_CUDA
  if (op.cuda) {
    if (q.type != kLinearFloat16) return fail("nndf Attention: the CUDA kernel is float16 only");
    if (!nndf_attention_head_size(d))
      return fail("nndf Attention: the CUDA kernel takes head sizes that are multiples of 8, up to 256");
    if (outputs < 4) return fail("nndf Attention: on CUDA the fourth output (the workspace) must be named");
    const int64_t elements = nndf_attention_workspace(a);
    ORT_TRY(output(context, 3, &elements, 1, &wv));
    if (!wv) return fail("nndf Attention: on CUDA the fourth output (the workspace) must be named");
    ORT_TRY(read(wv, &workspace));
    if (a.batch == 0 || a.seq == 0) return nullptr;
    void* stream = nullptr;
    ORT_TRY(ort_fn<OrtStatus* (*)(const OrtKernelContext*, void**)>(g_api, kKernelContextGetGPUComputeStream)(context, &stream));
    const char* error = nndf_attention_cuda(a, static_cast<float*>(workspace.data), stream);
    return error ? fail(error) : nullptr;
  }
#endif
  if (op.cuda || q.type != kLinearFloat32)
    return fail("nndf Attention: this build has no kernel for this provider and type");
  if (outputs > 3) {
    const int64_t none = 0;
    ORT_TRY(output(context, 3, &none, 1, &wv));
  }
  const size_t cache_bytes = static_cast<size_t>(a.batch * a.kv_heads * a.length * d) * sizeof(float);
  if (op.causal && a.cache_k != a.past_k) memcpy(a.cache_k, a.past_k, cache_bytes);
  if (op.causal && a.cache_v != a.past_v) memcpy(a.cache_v, a.past_v, cache_bytes);
  cpu_attention(a);
  return nullptr;
}

OrtStatus* attention_create(const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info, void** kernel) {
  const int64_t heads = attribute<int64_t>(info, "num_heads", 0, kKernelInfoGetAttributeInt64);
  const int64_t kv_heads = attribute<int64_t>(info, "kv_num_heads", heads, kKernelInfoGetAttributeInt64);
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads)
    return fail("nndf Attention: num_heads must be positive and a multiple of kv_num_heads");
  *kernel = new AttentionKernel{static_cast<const Op*>(op)->ep != nullptr, heads, kv_heads,
                                attribute<int64_t>(info, "local_window_size", -1, kKernelInfoGetAttributeInt64),
                                attribute<float>(info, "scale", 0.f, kKernelInfoGetAttributeFloat),
                                attribute<int64_t>(info, "causal", 1, kKernelInfoGetAttributeInt64) != 0};
  return nullptr;
}

constexpr size_t kAttentionSeqlens = 5, kAttentionWorkspace = 3;

Op attention_op(int dtype, const char* ep) {
  Op op = base_op(dtype, ep);
  op.GetName = [](const OrtCustomOp*) { return "Attention"; };
  op.GetInputType = [](const OrtCustomOp* self, size_t i) {
    return i == kAttentionSeqlens ? kInt32 : static_cast<const Op*>(self)->dtype;
  };
  op.GetInputTypeCount = [](const OrtCustomOp*) { return size_t{8}; };
  op.GetOutputType = [](const OrtCustomOp* self, size_t i) {
    return i == kAttentionWorkspace ? kLinearFloat32 : static_cast<const Op*>(self)->dtype;
  };
  op.GetOutputTypeCount = [](const OrtCustomOp*) { return size_t{4}; };
  op.KernelDestroy = [](void* kernel) { delete static_cast<AttentionKernel*>(kernel); };
  op.GetInputCharacteristic = [](const OrtCustomOp*, size_t i) {
    return i == 0 || i == 3 || i == 4 ? kInputRequired : kInputOptional;
  };
  op.GetOutputCharacteristic = [](const OrtCustomOp*, size_t i) { return i == 0 ? kInputRequired : kInputOptional; };
  op.CreateKernelV2 = attention_create;
  op.KernelComputeV2 = attention_compute;
  return op;
}

Op g_ops[] = {
    linear_op(kLinearFloat32, nullptr),
    attention_op(kLinearFloat32, nullptr),
#ifdef NNDF_CUDA
    linear_op(kLinearFloat16, "CUDAExecutionProvider"),
    linear_op(kLinearFloat32, "CUDAExecutionProvider"),
    attention_op(kLinearFloat16, "CUDAExecutionProvider"),
#endif
};

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                                const OrtApiBase* base) {
  g_api = base->GetApi(kOrtApiVersion);
  if (!g_api) return nullptr;  // ONNX Runtime older than 1.16: the graph then fails to load, naming the op
  static OrtCustomOpDomain* domain = nullptr;
  if (!domain) {
    ORT_TRY(ort_fn<OrtStatus* (*)(const char*, OrtCustomOpDomain**)>(g_api, kCreateCustomOpDomain)("nndf", &domain));
    for (Op& op : g_ops)
      ORT_TRY(ort_fn<OrtStatus* (*)(OrtCustomOpDomain*, const OrtCustomOp*)>(g_api, kCustomOpDomainAdd)(domain, &op));
  }
  return ort_fn<OrtStatus* (*)(OrtSessionOptions*, OrtCustomOpDomain*)>(g_api, kAddCustomOpDomain)(options, domain);
}
