// A kernel launch that may start while the kernel before it on the stream ends (programmatic dependent launch,
// Hopper and later): the kernel waits for that kernel's output itself (`griddepcontrol.wait`) before reading it.
#pragma once
#include <cuda_runtime.h>
#include <stdlib.h>

// Whether the environment variable `name` starts with `value`: the ops' measurement knobs, read at every launch (a
// captured graph keeps what it was captured with)
inline bool env_starts(const char* name, char value) {
  const char* v = getenv(name);
  return v && v[0] == value;
}

template <typename... Params, typename... Args>
cudaError_t launch_programmatic(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                                cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}
