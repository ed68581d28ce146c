// One request relayed to an instance: a thread runs the upstream exchange (cpp-httplib) and hands
// the status, headers and body pieces to the router's handler as they arrive, so a stream reaches
// the client piece by piece. Either side can end it: the upstream finishing or failing, or the
// client going away (cancel: the upstream connection is closed, and the instance frees the work).
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kvasir::router {

struct UpstreamRequest {
  std::string url;   // http://host:port
  std::string method = "POST";
  std::string path;  // with the query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds read_timeout{60000};  // between two pieces of the answer
};

class Relay {
 public:
  // Starts the exchange. `on_end(failed)` runs once on the relay's thread when it ends; failed:
  // the instance did not answer or the connection broke (not an HTTP error status).
  static std::shared_ptr<Relay> start(UpstreamRequest request, std::function<void(bool failed)> on_end);

  // Waits for the status line and headers. False: the exchange failed before them (error()).
  bool wait_headers();
  int status() const { return status_; }
  const std::string& content_type() const { return content_type_; }

  enum class Next { piece, end, waiting };
  // The next body piece into `out` (piece), the end of the body (end: failed() says how), or
  // nothing within `wait` (waiting).
  Next next(std::string& out, std::chrono::milliseconds wait);
  bool failed() const;
  std::string error() const;
  // The client is gone: stop reading (the upstream connection closes at its next piece).
  void cancel();

 private:
  Relay() = default;
  void run(UpstreamRequest request, std::function<void(bool)> on_end);

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool headers_in_ = false, finished_ = false, failed_ = false, cancelled_ = false;
  int status_ = 0;
  std::string content_type_;
  std::deque<std::string> pieces_;
  std::string error_;
};

}  // namespace kvasir::router
