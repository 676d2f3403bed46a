// The parts of ONNX Runtime's C ABI this library uses, declared here so that it builds without ONNX Runtime's
// headers (its wheels ship none): opaque handles, the custom-op table ONNX Runtime reads, and the slots of its
// function table (`OrtApi`, append-only since 1.0: a slot's index never changes) that the ops call. The ops ask
// for API version 16 (ONNX Runtime 1.16, the first with KernelContext_GetResource) and use no later slot.
#pragma once
#include <stddef.h>
#include <stdint.h>

struct OrtStatus;
struct OrtValue;
struct OrtKernelInfo;
struct OrtKernelContext;
struct OrtTensorTypeAndShapeInfo;
struct OrtCustomOpDomain;
struct OrtSessionOptions;
struct OrtApi;  // a table of function pointers, read by slot

struct OrtApiBase {
  const OrtApi* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)();
};

constexpr uint32_t kOrtApiVersion = 16;

enum OrtSlot : int {  // indices into OrtApi
  kCreateStatus = 0,
  kCreateCustomOpDomain = 26,
  kCustomOpDomainAdd = 27,
  kAddCustomOpDomain = 28,
  kGetTensorMutableData = 51,
  kGetTensorElementType = 60,
  kGetDimensionsCount = 61,
  kGetDimensions = 62,
  kGetTensorTypeAndShape = 65,
  kKernelInfoGetAttributeFloat = 85,
  kKernelInfoGetAttributeInt64 = 86,
  kKernelContextGetInputCount = 88,
  kKernelContextGetOutputCount = 89,
  kKernelContextGetInput = 90,
  kKernelContextGetOutput = 91,
  kReleaseStatus = 93,
  kReleaseTensorTypeAndShapeInfo = 99,
  kKernelContextGetGPUComputeStream = 193,
  kKernelContextGetResource = 265,
};

template <typename Fn>
Fn ort_fn(const OrtApi* api, OrtSlot slot) {
  return reinterpret_cast<Fn>(reinterpret_cast<void* const*>(api)[slot]);
}

constexpr int kOrtFail = 1, kOrtInvalidArgument = 2;  // OrtErrorCode
constexpr int kInputRequired = 0, kInputOptional = 1;  // OrtCustomOpInputOutputCharacteristic
constexpr int kMemTypeDefault = 0;                     // OrtMemType
constexpr int kCudaResourceVersion = 1, kCudaCublasHandle = 10002;  // KernelContext_GetResource's CUDA resources

// OrtCustomOp, field by field; ONNX Runtime reads the fields the op's `version` has (16: up to KernelComputeV2)
struct OrtCustomOp {
  uint32_t version;
  void* (*CreateKernel)(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info);
  const char* (*GetName)(const OrtCustomOp* op);
  const char* (*GetExecutionProviderType)(const OrtCustomOp* op);
  int (*GetInputType)(const OrtCustomOp* op, size_t index);
  size_t (*GetInputTypeCount)(const OrtCustomOp* op);
  int (*GetOutputType)(const OrtCustomOp* op, size_t index);
  size_t (*GetOutputTypeCount)(const OrtCustomOp* op);
  void (*KernelCompute)(void* kernel, OrtKernelContext* context);
  void (*KernelDestroy)(void* kernel);
  int (*GetInputCharacteristic)(const OrtCustomOp* op, size_t index);
  int (*GetOutputCharacteristic)(const OrtCustomOp* op, size_t index);
  int (*GetInputMemoryType)(const OrtCustomOp* op, size_t index);
  int (*GetVariadicInputMinArity)(const OrtCustomOp* op);
  int (*GetVariadicInputHomogeneity)(const OrtCustomOp* op);
  int (*GetVariadicOutputMinArity)(const OrtCustomOp* op);
  int (*GetVariadicOutputHomogeneity)(const OrtCustomOp* op);
  OrtStatus* (*CreateKernelV2)(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info, void** kernel);
  OrtStatus* (*KernelComputeV2)(void* kernel, OrtKernelContext* context);
  void* reserved[7];  // InferOutputShapeFn ... ReleaseAliasMap: read only by later versions, left null
};
