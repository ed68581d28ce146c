#include "http/transport.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "http/wire.h"

namespace kvasir::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

constexpr size_t kMaxQueuedPieces = 64;  // a stream's writer waits beyond this many unsent pieces
constexpr auto kLinger = std::chrono::milliseconds(1000);  // reading what a refused client still sends

// One request handed to a worker, shared by the worker and the connection that writes its response.
// The connection runs on the I/O thread and sleeps on `wake`; the worker changes the state under
// `mutex` and then posts wake.cancel() to the I/O thread.
struct Exchange {
  explicit Exchange(net::any_io_executor io) : wake(io, net::steady_timer::time_point::max()) {}
  Request request;
  Response response;
  std::mutex mutex;
  std::condition_variable room;  // the worker waits here while too much is queued
  std::deque<std::string> pieces;
  bool head_ready = false;  // response's status/headers (and whole body, or stream) are set
  bool finished = false;    // no more pieces will come
  bool closed = false;      // the connection is gone: writes fail
  bool peer_hung_up = false;
  net::steady_timer wake;

  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      closed = true;
    }
    request.gone->store(true, std::memory_order_release);
    room.notify_all();
  }
};

class ExchangeSink : public StreamSink {
 public:
  ExchangeSink(std::shared_ptr<Exchange> ex, net::io_context& io) : ex_(std::move(ex)), io_(io) {}
  bool write(std::string_view data) override {
    if (data.empty()) return !failed_;
    std::unique_lock<std::mutex> lock(ex_->mutex);
    ex_->room.wait(lock, [&] { return ex_->closed || ex_->pieces.size() < kMaxQueuedPieces; });
    if (ex_->closed) return !(failed_ = true);
    ex_->pieces.emplace_back(data);
    lock.unlock();
    net::post(io_, [ex = ex_] { ex->wake.cancel(); });
    return true;
  }
  bool failed() const { return failed_; }

 private:
  std::shared_ptr<Exchange> ex_;  // shared: the I/O thread's wake-up may outlive this sink
  net::io_context& io_;
  bool failed_ = false;
};

// Handlers that may block run here; a fixed set of threads and a bounded queue.
class WorkerPool {
 public:
  void start(size_t threads) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

template <typename Body>
void copy_head(bhttp::response<Body>& m, const Response& r, bool keep_alive) {
  m.version(11);
  m.result(unsigned(r.status));
  m.set(bhttp::field::server, "kvasir");
  for (const auto& [name, value] : r.headers.fields()) m.insert(name, value);
  m.set(bhttp::field::content_type, r.content_type);
  m.keep_alive(keep_alive);
}

}  // namespace

struct Connection {
  explicit Connection(tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
  std::shared_ptr<Exchange> current;  // the request on a worker, if any
};

struct Transport::Impl {
  Impl(TransportOptions o, Service& s) : options(std::move(o)), service(s), acceptor(io) {}

  TransportOptions options;
  Service& service;
  net::io_context io{1};
  tcp::acceptor acceptor;
  std::thread io_thread;
  WorkerPool workers;
  std::list<std::weak_ptr<Connection>> connections;  // I/O thread only
  bool stopping = false;                               // I/O thread only
  std::atomic<int64_t> open{0}, total{0}, refused{0}, requests{0}, in_flight{0};
  std::mutex idle_mutex;
  std::condition_variable idle;  // in_flight reached 0
  bool started = false;

  net::awaitable<void> accept_loop();
  net::awaitable<void> session(std::shared_ptr<Connection> c);
  net::awaitable<bool> write_whole(beast::tcp_stream& s, Response& r, bool keep_alive);
  net::awaitable<bool> write_exchange(Connection& c, Exchange& ex, bool keep_alive);
  net::awaitable<void> refuse(beast::tcp_stream& s, const ParseFailure& f);
  void dispatch(const std::shared_ptr<Exchange>& ex);
  void watch_hangup(Connection& c, const std::shared_ptr<Exchange>& ex);
  void request_done();
};

void Transport::Impl::request_done() {
  if (in_flight.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(idle_mutex);
    idle.notify_all();
  }
}

void Transport::Impl::dispatch(const std::shared_ptr<Exchange>& ex) {
  workers.post([this, ex] {
    Exchange& e = *ex;
    auto wake = [&] { net::post(io, [ex] { ex->wake.cancel(); }); };
    try {
      service.handle(e.request, e.response);
    } catch (...) {
      e.response = service.error(500, "internal server error", "internal_error");
    }
    std::function<bool(StreamSink&)> stream = e.response.stream;  // the connection reads the response from here on
    {
      std::lock_guard<std::mutex> lock(e.mutex);
      e.head_ready = true;
      if (!stream) e.finished = true;
    }
    wake();
    if (stream) {
      ExchangeSink sink(ex, io);
      try {
        while (stream(sink) && !sink.failed()) {
        }
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> lock(e.mutex);
        e.finished = true;
      }
      wake();
      if (e.response.on_close) e.response.on_close(!sink.failed());
    }
    request_done();
  });
}

// Notices, while a request is handled, that the client closed its side (a readable socket with
// nothing to read). Pipelined bytes are left in place for the next request.
void Transport::Impl::watch_hangup(Connection& c, const std::shared_ptr<Exchange>& ex) {
  tcp::socket& sock = c.stream.socket();
  sock.async_wait(tcp::socket::wait_read, [&sock, ex](error_code ec) {
    if (ec) return;  // cancelled: the response is done, or the socket is gone
    char byte;
    error_code peek_ec;
    const size_t n = sock.receive(net::buffer(&byte, 1), tcp::socket::message_peek, peek_ec);
    if (n > 0 || peek_ec == net::error::would_block) return;
    {
      std::lock_guard<std::mutex> lock(ex->mutex);
      ex->peer_hung_up = true;
    }
    ex->close();
    ex->wake.cancel();
  });
}

net::awaitable<bool> Transport::Impl::write_whole(beast::tcp_stream& s, Response& r, bool keep_alive) {
  bhttp::response<bhttp::string_body> m;
  copy_head(m, r, keep_alive);
  m.body() = std::move(r.body);
  m.prepare_payload();
  s.expires_after(options.write_timeout);
  error_code ec;
  co_await bhttp::async_write(s, m, net::redirect_error(net::use_awaitable, ec));
  co_return !ec;
}

// Waits for the worker's response and writes it, whole or as chunks while they come.
net::awaitable<bool> Transport::Impl::write_exchange(Connection& c, Exchange& ex, bool keep_alive) {
  error_code ec;
  auto wait = [&]() -> net::awaitable<void> {
    ex.wake.expires_at(net::steady_timer::time_point::max());
    co_await ex.wake.async_wait(net::redirect_error(net::use_awaitable, ec));
  };
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(ex.mutex);
      if (ex.head_ready) break;
    }
    co_await wait();
  }
  if (!ex.response.stream) {
    if (ex.request.client_gone()) co_return false;
    co_return co_await write_whole(c.stream, ex.response, keep_alive);
  }
  bhttp::response<bhttp::empty_body> head;
  copy_head(head, ex.response, keep_alive);
  head.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> sr{head};
  c.stream.expires_after(options.write_timeout);
  co_await bhttp::async_write_header(c.stream, sr, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  for (;;) {
    std::string out;
    bool finished = false, closed = false;
    {
      std::lock_guard<std::mutex> lock(ex.mutex);
      for (auto& p : ex.pieces) out += p;
      ex.pieces.clear();
      finished = ex.finished;
      closed = ex.closed;
    }
    ex.room.notify_all();
    if (closed) co_return false;
    if (!out.empty()) {
      c.stream.expires_after(options.write_timeout);
      co_await net::async_write(c.stream, bhttp::make_chunk(net::buffer(out)),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return false;
      continue;  // more may have come meanwhile
    }
    if (finished) break;
    co_await wait();
  }
  c.stream.expires_after(options.write_timeout);
  co_await net::async_write(c.stream, bhttp::make_chunk_last(), net::redirect_error(net::use_awaitable, ec));
  co_return !ec;
}

// Answers a request that cannot be read (too large, malformed), then reads and drops what the
// client still sends for a moment, so that it sees the answer instead of a reset.
net::awaitable<void> Transport::Impl::refuse(beast::tcp_stream& s, const ParseFailure& f) {
  Response r = service.error(f.status, f.message, f.status == 413   ? "request_too_large"
                                                  : f.status == 431 ? "headers_too_large"
                                                                    : "bad_request");
  if (!co_await write_whole(s, r, false)) co_return;
  error_code ec;
  s.socket().shutdown(tcp::socket::shutdown_send, ec);
  s.expires_after(kLinger);
  std::vector<char> sink(64 << 10);
  for (size_t drained = 0; drained < (16u << 20);) {
    const size_t n = co_await s.async_read_some(net::buffer(sink), net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    drained += n;
  }
}

net::awaitable<void> Transport::Impl::session(std::shared_ptr<Connection> c) {
  beast::flat_buffer buffer;
  error_code ec;
  for (;;) {
    wire::Parser parser;
    wire::configure(parser, options.limits);
    c->stream.expires_after(options.header_timeout);
    co_await bhttp::async_read_header(c->stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
    if (!ec && !parser.is_done()) {
      if (wire::expects_continue(parser)) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        c->stream.expires_after(options.write_timeout);
        co_await net::async_write(c->stream, net::buffer(kContinue), net::redirect_error(net::use_awaitable, ec));
      }
      if (!ec) {
        c->stream.expires_after(options.body_timeout);
        co_await bhttp::async_read(c->stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
      }
    }
    if (ec) {
      if (const ParseFailure f = wire::classify(ec); f.status != 0 && !stopping) co_await refuse(c->stream, f);
      break;
    }
    ++requests;
    Request req = wire::to_request(parser);
    bool keep_alive = req.keep_alive;
    Response res;
    bool answered = false;
    try {
      answered = service.handle_inline(req, res);
    } catch (...) {
      res = service.error(500, "internal server error", "internal_error");
      answered = true;
    }
    if (!answered && stopping) {
      res = service.error(503, "the server is shutting down", "shutting_down");
      answered = true;
      keep_alive = false;
    }
    if (!answered && in_flight.load() >= int64_t(options.workers + options.max_queued)) {
      res = service.error(503, "the server is overloaded: too many requests in progress", "overloaded");
      res.headers.set("Retry-After", "1");
      answered = true;
    }
    bool ok = false;
    if (answered) {
      ok = co_await write_whole(c->stream, res, keep_alive);
    } else {
      auto ex = std::make_shared<Exchange>(io.get_executor());
      ex->request = std::move(req);
      c->current = ex;
      in_flight.fetch_add(1);
      dispatch(ex);
      watch_hangup(*c, ex);
      ok = co_await write_exchange(*c, *ex, keep_alive);
      if (!ok) ex->close();
      error_code ignored;
      c->stream.socket().cancel(ignored);  // ends the hang-up watch
      c->current.reset();
      std::lock_guard<std::mutex> lock(ex->mutex);
      if (ex->peer_hung_up) ok = false;
    }
    if (!ok || !keep_alive || stopping) break;
  }
  error_code ignored;
  c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  c->stream.close();
}

net::awaitable<void> Transport::Impl::accept_loop() {
  for (;;) {
    error_code ec;
    tcp::socket sock = co_await acceptor.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open() || stopping) co_return;
      // Out of descriptors or a transient error: pause instead of spinning.
      net::steady_timer pause(io, std::chrono::milliseconds(50));
      co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    if (open.load() >= int64_t(options.max_connections)) {
      ++refused;
      error_code ignored;
      sock.close(ignored);
      continue;
    }
    sock.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<Connection>(std::move(sock));
    connections.remove_if([](const std::weak_ptr<Connection>& w) { return w.expired(); });
    connections.push_back(c);
    ++open;
    ++total;
    net::co_spawn(io, session(std::move(c)), [this](std::exception_ptr) { --open; });
  }
}

Transport::Transport(TransportOptions options, Service& service)
    : impl_(std::make_unique<Impl>(std::move(options), service)) {}

Transport::~Transport() { stop(); }

Status Transport::bind(const std::string& host, int port) {
  error_code ec;
  tcp::resolver resolver(impl_->io);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) return Error{"cannot resolve '" + host + "': " + ec.message()};
  const tcp::endpoint ep = results.begin()->endpoint();
  tcp::acceptor& a = impl_->acceptor;
  if (a.open(ep.protocol(), ec); ec) return Error{"cannot open a socket: " + ec.message()};
  a.set_option(net::socket_base::reuse_address(true), ec);
  if (a.bind(ep, ec); ec) {
    const std::string why = ec == net::error::address_in_use ? "the port is in use (another server? --port picks another)"
                                                             : ec.message();
    error_code ignored;
    a.close(ignored);
    return Error{"cannot bind to " + host + ":" + std::to_string(port) + ": " + why};
  }
  if (a.listen(net::socket_base::max_listen_connections, ec); ec) return Error{"cannot listen: " + ec.message()};
  return Status{};
}

int Transport::port() const {
  error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : int(ep.port());
}

void Transport::start() {
  Impl& m = *impl_;
  if (m.started) return;
  m.started = true;
  m.workers.start(std::max<size_t>(1, m.options.workers));
  net::co_spawn(m.io, m.accept_loop(), net::detached);
  m.io_thread = std::thread([&m] {
    auto guard = net::make_work_guard(m.io);
    m.io.run();
  });
}

void Transport::stop(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  if (!m.started) {
    error_code ec;
    m.acceptor.close(ec);
    return;
  }
  m.started = false;
  // On the I/O thread: no new connections, every open one ends, every exchange fails its writes.
  std::promise<void> closed;
  net::post(m.io, [&m, &closed] {
    m.stopping = true;
    error_code ec;
    m.acceptor.close(ec);
    for (auto& w : m.connections) {
      auto c = w.lock();
      if (!c) continue;
      if (c->current) c->current->close(), c->current->wake.cancel();
      c->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
      c->stream.socket().close(ec);
    }
    closed.set_value();
  });
  closed.get_future().wait();
  {
    std::unique_lock<std::mutex> lock(m.idle_mutex);
    m.idle.wait_for(lock, grace, [&m] { return m.in_flight.load() == 0; });
  }
  m.io.stop();
  if (m.io_thread.joinable()) m.io_thread.join();
  m.workers.stop();
}

TransportStats Transport::stats() const {
  const Impl& m = *impl_;
  return TransportStats{.connections_open = m.open.load(),
                        .connections_total = m.total.load(),
                        .connections_refused = m.refused.load(),
                        .requests_total = m.requests.load(),
                        .requests_in_flight = m.in_flight.load()};
}

}  // namespace kvasir::http
