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
// CUDA (float16, float32) a few rows of X go to this library's kernel (linear.cu), more to cuBLAS through ONNX
// Runtime's handle; on the CPU (float32) a plain loop, there to check a graph that uses the op against ONNX
// Runtime's own ops.
#include <stdio.h>
#include <string.h>

#include <vector>

#include "linear.h"
#include "ort_abi.h"

namespace {

const OrtApi* g_api = nullptr;

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

struct LinearOp : OrtCustomOp {
  int dtype;       // ONNX element type of every input and the output
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
  *kernel = new Kernel{static_cast<const LinearOp*>(op)->ep != nullptr,
                       attribute<float>(info, "alpha", 1.f, kKernelInfoGetAttributeFloat), static_cast<int>(activation),
                       static_cast<int>(norm), attribute<float>(info, "epsilon", 1e-5f, kKernelInfoGetAttributeFloat)};
  return nullptr;
}

LinearOp linear_op(int dtype, const char* ep) {
  LinearOp op{};
  op.version = kOrtApiVersion;
  op.dtype = dtype;
  op.ep = ep;
  op.GetName = [](const OrtCustomOp*) { return "Linear"; };
  op.GetExecutionProviderType = [](const OrtCustomOp* self) { return static_cast<const LinearOp*>(self)->ep; };
  op.GetInputType = [](const OrtCustomOp* self, size_t) { return static_cast<const LinearOp*>(self)->dtype; };
  op.GetInputTypeCount = [](const OrtCustomOp*) { return size_t{6}; };
  op.GetOutputType = [](const OrtCustomOp* self, size_t) { return static_cast<const LinearOp*>(self)->dtype; };
  op.GetOutputTypeCount = [](const OrtCustomOp*) { return size_t{3}; };
  op.KernelDestroy = [](void* kernel) { delete static_cast<Kernel*>(kernel); };
  op.GetInputCharacteristic = [](const OrtCustomOp*, size_t index) { return index >= 2 ? kInputOptional : kInputRequired; };
  op.GetOutputCharacteristic = [](const OrtCustomOp*, size_t index) { return index >= 1 ? kInputOptional : kInputRequired; };
  op.GetInputMemoryType = [](const OrtCustomOp*, size_t) { return kMemTypeDefault; };
  op.GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  op.GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
  op.GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  op.GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
  op.CreateKernelV2 = create_kernel;
  op.KernelComputeV2 = compute;
  return op;
}

LinearOp g_ops[] = {
    linear_op(kLinearFloat32, nullptr),
#ifdef NNDF_CUDA
    linear_op(kLinearFloat16, "CUDAExecutionProvider"),
    linear_op(kLinearFloat32, "CUDAExecutionProvider"),
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
    for (LinearOp& op : g_ops)
      ORT_TRY(ort_fn<OrtStatus* (*)(OrtCustomOpDomain*, const OrtCustomOp*)>(g_api, kCustomOpDomainAdd)(domain, &op));
  }
  return ort_fn<OrtStatus* (*)(OrtSessionOptions*, OrtCustomOpDomain*)>(g_api, kAddCustomOpDomain)(options, domain);
}
