// The CUDA runner: the model's weights in device memory (quantized blocks kept quantized), the
// paged KV storage there with the engine's block tables, and the forward pass as kernels on one
// stream; the logits of the wanted rows come back to the host each step. Plain C++: callers need
// no CUDA headers, and a build without CUDA gets the same API answering "not built".
#pragma once
#include <memory>
#include <string>

#include "core/status.h"
#include "model/model.h"
#include "runtime/model_runner.h"

namespace kvasir::cuda {


// True when this build has the CUDA backend.
bool built_with_cuda();
// CUDA devices present (0 when none, when the driver is missing, or in a build without CUDA);
// `why` (optional) says why there are none.
int device_count(std::string* why = nullptr);
// "NVIDIA H200, 132 SMs, 139.8 GiB, sm_90" or an error.
Result<std::string> describe_device(int device);

// The device's copy bandwidth in GB/s (bytes read plus written by a 2 GiB device-to-device copy,
// the median of 5): the ceiling decode is measured against.
Result<double> copy_bandwidth_gbps(int device);

// Uploads the model and allocates the KV storage. Errors name what the backend does not take
// (a weight type, a head layout, mixture-of-experts layers).
// options.device names the device; the KV is F16 (options.kv's type, no per-layer types).
Result<std::unique_ptr<runtime::ModelRunner>> create_runner(const Model& model, const runtime::RunnerOptions& options);

// Parses "cpu", "cuda" or "cuda:N": the CUDA device ordinal, or -1 for the CPU.
Result<int> parse_device(const std::string& text);

}  // namespace kvasir::cuda
