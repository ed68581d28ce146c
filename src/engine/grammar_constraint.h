// A request's grammar as a logits processor (sample/logits_processor.h): tokens the grammar does
// not allow get -inf, and the end-of-generation tokens keep their logits where the document may
// end. A lazy grammar (tool calls with tool_choice "auto") starts only once its trigger text
// appears in the output, and applies from where the trigger began.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "sample/logits_processor.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::engine {

class GrammarConstraint final : public LogitsProcessor {
 public:
  // end_ids: the tokens that end generation (the vocabulary's and the request's stop tokens).
  // An empty trigger: the grammar applies from the first token.
  GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, std::string trigger,
                    const Tokenizer& tokenizer, std::vector<int32_t> end_ids);

  bool active(const RowContext&) const override { return matcher_.has_value(); }
  // Masks the row; tells later processors whether the document is complete (may_end) or only
  // ending is allowed (only_end); false when nothing at all is allowed.
  bool apply(std::span<float> row, RowContext& ctx) override;

  // What a picked token (not a stop token) did: started the grammar (its trigger completed),
  // completed the document (nothing may follow), or was refused (it cannot be: the mask allowed
  // it; the request then ends rather than break the format).
  struct Step {
    bool triggered = false, done = false, refused = false;
  };
  Step observe(int32_t token);

 private:
  Step watch_trigger(int32_t token);

  std::shared_ptr<const grammar::CompiledGrammar> grammar_;
  std::string trigger_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> end_ids_;
  std::optional<grammar::Matcher> matcher_;  // the state after the tokens picked so far
  std::string tail_;                         // before the trigger: the output's last bytes
  bool trigger_failed_ = false;
  std::vector<std::pair<int32_t, float>> ends_;  // scratch
};

}  // namespace kvasir::engine
