#include "engine/adapter_slots.h"

namespace kvasir {

Result<int32_t> AdapterSlots::acquire(runtime::ModelRunner& runner, const std::shared_ptr<const LoraAdapter>& adapter) {
  int32_t free_slot = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].adapter == adapter) {
      ++slots_[i].users;
      return int32_t(i);
    }
    if (!slots_[i].adapter && free_slot < 0) free_slot = int32_t(i);
  }
  if (free_slot < 0) {
    free_slot = int32_t(slots_.size());
    slots_.emplace_back();
  }
  if (auto s = runner.set_adapter(free_slot, adapter); !s) return Error{s.error(), s.error_code()};
  slots_[size_t(free_slot)] = {adapter, 1};
  return free_slot;
}

void AdapterSlots::release(runtime::ModelRunner& runner, int32_t slot) {
  if (slot < 0 || size_t(slot) >= slots_.size() || slots_[size_t(slot)].users == 0) return;
  Slot& s = slots_[size_t(slot)];
  if (--s.users > 0) return;
  s.adapter.reset();
  (void)runner.set_adapter(slot, nullptr);  // only a runner with slots got here
}

int32_t AdapterSlots::num_loaded() const {
  int32_t n = 0;
  for (const Slot& s : slots_) n += s.adapter != nullptr;
  return n;
}

}  // namespace kvasir
