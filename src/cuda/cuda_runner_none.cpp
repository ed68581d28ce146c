// The CUDA runner's API in a build without CUDA: every call says so.
#include "cuda/cuda_runner.h"
#include "cuda/kernel_check.h"

namespace kvasir::cuda {

bool built_with_cuda() { return false; }

int device_count(std::string* why) {
  if (why) *why = "this kvasir was built without CUDA (configure with -DKVASIR_CUDA=ON where nvcc is installed)";
  return 0;
}

Result<std::string> describe_device(int) {
  return Error{"this kvasir was built without CUDA", ErrorCode::unavailable};
}

Result<double> copy_bandwidth_gbps(int) { return Error{"this kvasir was built without CUDA", ErrorCode::unavailable}; }

Result<std::unique_ptr<runtime::ModelRunner>> create_runner(const Model&, const runtime::RunnerOptions&) {
  return Error{"this kvasir was built without CUDA (configure with -DKVASIR_CUDA=ON where nvcc is installed)",
               ErrorCode::unavailable};
}


Result<std::vector<float>> matmul_on_device(DType, const void*, int64_t, int64_t, const float*, int64_t, int) {
  return Error{"this kvasir was built without CUDA", ErrorCode::unavailable};
}
Result<std::vector<float>> dequantize_on_device(DType, const void*, int64_t, int64_t) {
  return Error{"this kvasir was built without CUDA", ErrorCode::unavailable};
}
Result<std::vector<float>> rms_norm_on_device(const float*, int64_t, int64_t, const float*, float) {
  return Error{"this kvasir was built without CUDA", ErrorCode::unavailable};
}

}  // namespace kvasir::cuda
