// Shared helpers for the tokenizer tests: locating ../shared and loading vocabularies once.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::test {

inline std::string shared_dir() { return KVASIR_SHARED_DIR; }

// The GGUF file holding vocabulary `name` ("llama-spm", ..., or "stories260K").
inline std::string vocab_path(const std::string& name) {
  if (name == "stories260K") return shared_dir() + "/models/stories260K.gguf";
  return shared_dir() + "/models/vocab/ggml-vocab-" + name + ".gguf";
}

// Loads (once per process) the tokenizer of vocabulary `name`; nullptr if the file is absent.
inline const Tokenizer* load_tokenizer_file(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(path);
  if (it != cache.end()) return it->second.get();
  if (!std::filesystem::exists(path)) return nullptr;
  auto file = MappedFile::open(path);
  EXPECT_TRUE(file.ok()) << file.error();
  if (!file) return nullptr;
  auto g = gguf::parse(file->bytes());
  EXPECT_TRUE(g.ok()) << g.error();
  if (!g) return nullptr;
  auto t = Tokenizer::from_gguf(*g);
  EXPECT_TRUE(t.ok()) << path << ": " << t.error();
  if (!t) return nullptr;
  return cache.emplace(path, std::make_unique<Tokenizer>(std::move(t).value())).first->second.get();
}

inline const Tokenizer* load_vocab(const std::string& name) { return load_tokenizer_file(vocab_path(name)); }

}  // namespace kvasir::test

// Skips the current test when a shared vocabulary is not available.
#define KV_REQUIRE_VOCAB(var, name)                                                    \
  const ::kvasir::Tokenizer* var = ::kvasir::test::load_vocab(name);                   \
  if (!var) GTEST_SKIP() << "vocabulary not available: " << ::kvasir::test::vocab_path(name)
