// Which LoRA adapters the runner holds in which of its slots: an adapter takes a slot when its
// first running request arrives and gives it up when its last one ends, so a batch mixes any
// adapters its requests name (each sequence's rows get their own delta; runtime/model_runner.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/lora.h"
#include "runtime/model_runner.h"

namespace kvasir {

class AdapterSlots {
 public:
  // The slot holding `adapter` (put into the runner's first free slot when it holds none yet).
  Result<int32_t> acquire(runtime::ModelRunner& runner, const std::shared_ptr<const LoraAdapter>& adapter);
  // One request on `slot` ended; the last one empties the slot.
  void release(runtime::ModelRunner& runner, int32_t slot);
  int32_t num_loaded() const;

 private:
  struct Slot {
    std::shared_ptr<const LoraAdapter> adapter;
    int32_t users = 0;
  };
  std::vector<Slot> slots_;
};

}  // namespace kvasir
