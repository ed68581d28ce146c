#include <string>

#include "cuda/cuda_runner.h"

namespace kvasir::cuda {

Result<int> parse_device(const std::string& text) {
  if (text.empty() || text == "cpu") return -1;
  if (text == "cuda") return 0;
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos)
    return std::stoi(text.substr(5));
  return Error{"unknown device '" + text + "' (cpu, cuda or cuda:N)", ErrorCode::invalid_argument};
}

}  // namespace kvasir::cuda
