// Knobs of a render: resource limits and the clock behind strftime_now().
#pragma once
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>

namespace kvasir::jinja {

// Every limit fails the render with an error rather than truncating anything.
struct Limits {
  size_t max_output_bytes = 32u << 20;  // the rendering, and any one string or repr built on the way
  uint64_t max_steps = 10'000'000;      // work budget: one step per node evaluated or statement run,
                                        // plus one per 16 bytes of strings built
  int max_nesting = 200;                // in the source: nested blocks and brackets, expression height
  int max_call_depth = 100;             // nested macro calls (recursion) and recursive loop calls
  int max_render_depth = 1000;          // nested evaluation at render time, all kinds together
};

struct RenderConfig {
  Limits limits;
  // Local wall-clock time for strftime_now(); unset: the system clock.
  std::function<std::tm()> now;
};

// A normalized std::tm (weekday and day of year filled in) for a fixed clock.
std::tm make_time(int year, int month, int day, int hour, int minute, int second);

}  // namespace kvasir::jinja
