// One streaming request as a client sees it: the clock starts when the request is sent, each SSE
// chunk with text is timed on arrival (TTFT, inter-token gaps), usage gives exact token counts.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "loadgen/stats.h"
#include "loadgen/workload.h"

namespace httplib {
class Client;
}

namespace kvasir::loadgen {

enum class Endpoint { completions, chat };

struct ClientOptions {
  std::string url = "http://127.0.0.1:8080";  // scheme://host:port[/prefix]
  Endpoint endpoint = Endpoint::completions;
  std::string model;    // empty: whatever /v1/models lists first
  std::string api_key;
  bool ignore_eos = true;  // fixes output lengths at max_tokens
  double temperature = 0;
  double timeout_s = 600;
};

// "http://host:port/prefix" -> ("http://host:port", "/prefix").
Result<std::pair<std::string, std::string>> split_url(const std::string& url);

// Incremental SSE parsing: feed bytes, get the payload of each complete "data:" line.
class SseParser {
 public:
  template <typename F>
  void feed(const char* data, size_t n, F&& on_data) {
    buf_.append(data, n);
    size_t start = 0, nl;
    while ((nl = buf_.find('\n', start)) != std::string::npos) {
      std::string_view line(buf_.data() + start, nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.rfind("data:", 0) == 0) {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        on_data(line);
      }
      start = nl + 1;
    }
    buf_.erase(0, start);
  }

 private:
  std::string buf_;
};

class Client {
 public:
  explicit Client(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Result<std::string> first_model();                         // GET /v1/models
  Result<std::vector<int32_t>> tokenize(const std::string& text);  // POST /tokenize, no special tokens
  // Sends one request and waits for the whole stream. `run_start` is the run's time origin.
  RequestOutcome send(const RequestSpec& spec, const std::string& model,
                      std::chrono::steady_clock::time_point run_start);

 private:
  std::string body_for(const RequestSpec& spec, const std::string& model) const;

  ClientOptions options_;
  std::string prefix_;
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace kvasir::loadgen
