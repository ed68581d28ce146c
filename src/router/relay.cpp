#include "router/relay.h"

#include <httplib.h>

#include <thread>

namespace kvasir::router {

std::shared_ptr<Relay> Relay::start(UpstreamRequest request, std::function<void(bool failed)> on_end) {
  std::shared_ptr<Relay> relay(new Relay());
  // The thread holds the relay alive until the exchange ends, whoever else let go of it.
  std::thread([relay, request = std::move(request), on_end = std::move(on_end)]() mutable {
    relay->run(std::move(request), std::move(on_end));
  }).detach();
  return relay;
}

void Relay::run(UpstreamRequest request, std::function<void(bool)> on_end) {
  httplib::Client client(request.url);
  client.set_connection_timeout(request.connect_timeout);
  client.set_read_timeout(request.read_timeout);
  client.set_write_timeout(request.read_timeout);
  client.set_keep_alive(false);
  httplib::Request req;
  req.method = request.method;
  req.path = request.path;
  req.body = std::move(request.body);
  for (auto& [k, v] : request.headers) req.headers.emplace(k, v);
  req.response_handler = [this](const httplib::Response& r) {
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = r.status;
    content_type_ = r.get_header_value("Content-Type");
    headers_in_ = true;
    cv_.notify_all();
    return !cancelled_;
  };
  req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
    std::lock_guard<std::mutex> lock(mutex_);
    pieces_.emplace_back(data, n);
    cv_.notify_all();
    return !cancelled_;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = client.send(req, res, err);
  bool failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = !ok && !cancelled_;
    failed = failed_;
    if (failed_) error_ = httplib::to_string(err);
    finished_ = true;
    cv_.notify_all();
  }
  on_end(failed);
}

bool Relay::wait_headers() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return headers_in_ || finished_; });
  return headers_in_;
}

Relay::Next Relay::next(std::string& out, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, wait, [this] { return !pieces_.empty() || finished_; })) return Next::waiting;
  if (pieces_.empty()) return Next::end;
  out = std::move(pieces_.front());
  pieces_.pop_front();
  return Next::piece;
}

bool Relay::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

std::string Relay::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void Relay::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
}

}  // namespace kvasir::router
