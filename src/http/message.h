// HTTP requests and responses as the handlers see them: plain values, no transport types. The
// transport (http/transport.h) fills a Request from the wire and writes a Response back, whole
// or as a chunked stream.
#pragma once
#include <any>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvasir::http {

// Header fields in arrival order; names compare case-insensitively.
class Headers {
 public:
  // The first value of `name`, or "" when absent.
  const std::string& get(std::string_view name) const;
  bool has(std::string_view name) const;
  void add(std::string name, std::string value) { fields_.emplace_back(std::move(name), std::move(value)); }
  void set(std::string name, std::string value);  // replaces every field of that name
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

bool iequals(std::string_view a, std::string_view b);

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // the target without its query
  Headers headers;
  std::string body;
  bool keep_alive = true;
  // Set by the access checks: who sent the request (an API key's label), "" when anonymous.
  std::string principal;
  // Set by the admission's body check: the body as parsed, for the handler (the server keeps a
  // std::shared_ptr<nlohmann::ordered_json> here, so that the handler can move parts out).
  std::any parsed;
  // Becomes true when the client hangs up while its request is being handled, so that a handler
  // waiting on work (a non-streaming generation) can give up.
  std::shared_ptr<std::atomic<bool>> gone = std::make_shared<std::atomic<bool>>(false);

  const std::string& header(std::string_view name) const { return headers.get(name); }
  bool client_gone() const { return gone->load(std::memory_order_acquire); }
};

// Where a streaming response writes its pieces.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // Queues `data` for the client (waiting while too much is queued). False: the client is gone
  // or the server is stopping; the stream should end.
  virtual bool write(std::string_view data) = 0;
};

struct Response {
  int status = 200;
  Headers headers;  // besides Content-Type / Content-Length / Transfer-Encoding, which the transport sets
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // When set, the body is a chunked stream: the transport calls `stream` on a worker thread again
  // and again until it returns false (finished, or a write failed).
  std::function<bool(StreamSink&)> stream;
  // Called once after a streamed body ended; `completed`: every piece reached the socket.
  std::function<void(bool completed)> on_close;

  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

}  // namespace kvasir::http
