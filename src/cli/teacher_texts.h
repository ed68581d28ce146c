// On-policy text for distillation: the model's own continuations of a list of openings, generated
// through the engine (continuous batching), so that a draft learns the text it will be asked to
// predict when the model decodes. Each opening is continued `samples` times at a temperature; with
// `greedy`, each sample's first words become an opening the model then continues greedily (the
// texts greedy decoding meets, which sampling alone rarely reaches).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {

struct TeacherTextOptions {
  int32_t samples = 4;
  int32_t max_tokens = 256;
  float temperature = 0.8f, top_p = 0.95f;
  bool greedy = false;
  int32_t greedy_words = 24;  // the sample's words kept as the greedy pass's opening
  uint64_t seed = 1;
  int threads = 0;
  int32_t max_seqs = 16;
  std::function<void(int64_t done, int64_t total, int64_t tokens)> progress;
};

struct TeacherTexts {
  std::vector<std::string> texts;  // opening + continuation, in the prompts' order (greedy ones after each prompt's samples)
  int64_t generated_tokens = 0;
  double seconds = 0;
};

Result<TeacherTexts> teacher_texts(const Model& model, const Tokenizer& tok, std::span<const std::string> prompts,
                                   const TeacherTextOptions& o);

// The openings of a prompts file: one per line, blank lines skipped, "\n" inside a line written "\\n".
Result<std::vector<std::string>> read_prompts(const std::string& path);

}  // namespace kvasir::cli
