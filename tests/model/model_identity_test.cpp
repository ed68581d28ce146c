// Model identity is the weights' content, not the file's path: a copy elsewhere keeps it (so KV
// can move between instances on different hosts), a changed tensor byte or another quantization
// changes it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/model.h"
#include "golden_util.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

std::string identity_of(const std::string& path) {
  auto m = Model::load(path);
  if (!m) throw std::runtime_error(m.error());
  return (*m)->identity();
}

class ModelIdentity : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = shared_path("models/fixture-llama-q4_k.gguf");
    if (!fs::exists(src_)) GTEST_SKIP() << "needs the shared fixture models";
    dir_ = fs::temp_directory_path() / ("kvasir_identity_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string src_;
  fs::path dir_;
};

TEST_F(ModelIdentity, SameTensorsAnywhereSameIdentity) {
  const std::string a = identity_of(src_);
  EXPECT_EQ(a.rfind("llama@", 0), 0u) << a;
  const fs::path copy = dir_ / "elsewhere.gguf";
  fs::copy_file(src_, copy);
  EXPECT_EQ(identity_of(copy.string()), a);
  EXPECT_NE(identity_of(shared_path("models/fixture-llama-q4_0.gguf")), a);
}

TEST_F(ModelIdentity, OneChangedWeightByteChangesIt) {
  auto m = Model::load(src_);
  ASSERT_TRUE(m) << m.error();
  const gguf::TensorInfo& t = (*m)->gguf().tensors.back();
  // Find the last tensor's first bytes in the file and flip one bit there.
  std::ifstream in(src_, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string_view needle(reinterpret_cast<const char*>(t.data), 64);
  const size_t pos = bytes.find(needle);
  ASSERT_NE(pos, std::string::npos);
  bytes[pos + 1] = char(bytes[pos + 1] ^ 0x10);
  const fs::path changed = dir_ / "changed.gguf";
  std::ofstream(changed, std::ios::binary) << bytes;
  EXPECT_NE(identity_of(changed.string()), (*m)->identity());
}

}  // namespace
}  // namespace kvasir
