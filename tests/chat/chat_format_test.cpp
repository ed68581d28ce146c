// Which chat template a model without one gets, on real vocabularies, and the prompt the default
// model (Gemma 3 270M, a base model with no template in its file) is given for a conversation.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "chat/chat_format.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;
using namespace kvasir::chat;

namespace {

struct Loaded {
  MappedFile file;
  gguf::File g;
  std::optional<Tokenizer> tok;
};

std::unique_ptr<Loaded> load(const std::string& path) {
  auto l = std::make_unique<Loaded>();
  auto f = MappedFile::open(path);
  if (!f) return nullptr;
  l->file = std::move(*f);
  auto g = gguf::parse(l->file.bytes());
  if (!g) return nullptr;
  l->g = std::move(*g);
  auto t = Tokenizer::from_gguf(l->g);
  if (!t) return nullptr;
  l->tok.emplace(std::move(*t));
  return l;
}

// The built-in a file would get if it had no template of its own.
std::string chosen_for(const std::string& path) {
  auto l = load(path);
  if (!l) return "(cannot load " + path + ")";
  return std::string(chat::ChatFormatter::family_template(l->g, *l->tok).name);
}

}  // namespace

TEST(ChatFormat, FamilyTemplatesForRealVocabularies) {
  const std::string v = std::string(KVASIR_SHARED_DIR) + "/models/vocab/ggml-vocab-";
  if (!std::ifstream(v + "llama-bpe.gguf")) GTEST_SKIP() << "no ../shared vocabularies";
  EXPECT_EQ(chosen_for(v + "llama-bpe.gguf"), "llama3");
  EXPECT_EQ(chosen_for(v + "qwen2.gguf"), "chatml");
  EXPECT_EQ(chosen_for(v + "phi-3.gguf"), "phi3");
  EXPECT_EQ(chosen_for(v + "llama-spm.gguf"), "llama2");
  // GPT-2's vocabulary has no chat markers at all: never ChatML split into text.
  EXPECT_EQ(chosen_for(v + "gpt-2.gguf"), "plain");
}

TEST(ChatFormat, OwnTemplateAndOverrides) {
  const std::string path = std::string(KVASIR_SHARED_DIR) + "/models/vocab/ggml-vocab-qwen2.gguf";
  auto l = load(path);
  if (!l) GTEST_SKIP() << "no ../shared vocabularies";
  auto own = chat::ChatFormatter::for_model(l->g, *l->tok);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->origin(), "the model's own");
  auto named = chat::ChatFormatter::for_model(l->g, *l->tok, "gemma");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->origin(), "built-in gemma (requested)");
  auto given = chat::ChatFormatter::for_model(l->g, *l->tok, "{{ messages[0]['content'] }}");
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->origin(), "given file");
}

TEST(ChatFormat, DefaultModelGetsGemmaTurns) {
  const std::string path = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  auto l = load(path);
  if (!l) GTEST_SKIP() << "the default model is not installed";
  auto f = chat::ChatFormatter::for_model(l->g, *l->tok);
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->origin(), "built-in gemma (the model has none)");
  const nlohmann::ordered_json messages = {{{"role", "system"}, {"content", "Answer in one word."}},
                                           {{"role", "user"}, {"content", "Capital of France?"}}};
  auto text = f->render(messages, {});
  ASSERT_TRUE(text.ok()) << text.error();
  EXPECT_EQ(*text, "<bos><start_of_turn>user\nAnswer in one word.\n\nCapital of France?<end_of_turn>\n"
                   "<start_of_turn>model\n");
  // The turn markers are single tokens, and BOS is not doubled.
  const auto ids = f->tokenize(*l->tok, *text);
  EXPECT_EQ(ids[0], l->tok->bos());
  EXPECT_EQ(ids[1], l->tok->token_to_id("<start_of_turn>"));
  EXPECT_NE(ids[2], l->tok->bos());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), l->tok->token_to_id("<end_of_turn>")), 1);
}
