#include "disagg/ucx_node.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace kvasir::disagg {
namespace {

constexpr unsigned kAmId = 7;

Error ucx_error(const std::string& what, ucs_status_t s) {
  return Error{what + ": " + ucs_status_string(s), ErrorCode::unavailable};
}

Result<sockaddr_storage> resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0 || !res)
    return Error{"cannot resolve '" + host + "': " + gai_strerror(rc), ErrorCode::invalid_argument};
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return out;
}

socklen_t addr_len(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// Whether something accepts TCP connections at `a` (within `timeout`). UCX 1.13 trips an internal
// assertion when a client-server endpoint fails before it is wired up (a refused connect), so a
// plain probe answers that case first.
bool tcp_reachable(const sockaddr_storage& a, std::chrono::milliseconds timeout) {
  const int fd = socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = false;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), addr_len(a)) == 0) {
    ok = true;
  } else if (errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, int(timeout.count())) == 1) {
      int err = 0;
      socklen_t len = sizeof(err);
      ok = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
  }
  close(fd);
  return ok;
}

}  // namespace

struct UcxNode::Impl {
  UcxOptions options;
  UcxCallbacks callbacks;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_listener_h listener = nullptr;
  uint16_t port = 0;
  int worker_fd = -1, wake_fd = -1;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<std::function<void()>> posted;
  // Progress thread only.
  std::unordered_map<PeerId, ucp_ep_h> eps;
  std::unordered_map<ucp_ep_h, PeerId> peers;
  PeerId next_peer = 1;

  ~Impl() {
    if (wake_fd >= 0) close(wake_fd);
  }
  Status init();
  void teardown();

  void post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      posted.push_back(std::move(fn));
    }
    const uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof(one));
  }

  PeerId add_peer(ucp_ep_h ep) {
    const PeerId id = next_peer++;
    eps[id] = ep;
    peers[ep] = id;
    return id;
  }

  // Closes an endpoint at once (its pending sends fail); the request is freed when it completes.
  static void close_ep(ucp_ep_h ep) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = ucp_ep_close_nbx(ep, &p);
    if (r && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
  }

  void drop_peer(PeerId id, const std::string& why) {
    auto it = eps.find(id);
    if (it == eps.end()) return;
    ucp_ep_h ep = it->second;
    eps.erase(it);
    peers.erase(ep);
    close_ep(ep);
    if (callbacks.on_peer_down && !stop) callbacks.on_peer_down(id, why);
  }

  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* self = static_cast<Impl*>(arg);
    auto it = self->peers.find(ep);
    if (it == self->peers.end()) return;
    self->drop_peer(it->second, std::string("connection lost: ") + ucs_status_string(status));
  }

  ucp_ep_params_t ep_params() {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = &Impl::on_ep_error;
    p.err_handler.arg = this;
    return p;
  }

  static void on_connection(ucp_conn_request_h request, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    ucp_ep_params_t p = self->ep_params();
    p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
    p.conn_request = request;
    ucp_ep_h ep = nullptr;
    if (ucp_ep_create(self->worker, &p, &ep) == UCS_OK) self->add_peer(ep);
  }

  struct Receive {
    Impl* self;
    PeerId peer;
    std::vector<uint8_t> header, payload;
  };
  // Receive buffers kept for the next messages (progress thread only): a fresh multi-megabyte
  // buffer per frame costs a page fault per 4 KiB and a zero fill.
  std::vector<std::vector<uint8_t>> spare;
  size_t spare_bytes = 0;
  static constexpr size_t kMaxSpareBytes = size_t(64) << 20;
  std::vector<uint8_t> take_buffer(size_t n) {
    std::vector<uint8_t> b;
    for (size_t i = 0; i < spare.size(); ++i)
      if (spare[i].capacity() >= n) {
        b = std::move(spare[i]);
        spare_bytes -= b.capacity();
        spare.erase(spare.begin() + ptrdiff_t(i));
        break;
      }
    b.resize(n);  // a reused buffer of this size or larger is not written
    return b;
  }
  void give_back(std::vector<uint8_t> b) {
    if (spare_bytes + b.capacity() > kMaxSpareBytes) return;
    spare_bytes += b.capacity();
    spare.push_back(std::move(b));
  }
  void deliver(PeerId peer, std::span<const uint8_t> header, std::span<const uint8_t> payload) {
    if (callbacks.on_message && !stop) callbacks.on_message(peer, header, payload);
  }
  static void on_received(void* request, ucs_status_t status, size_t, void* user_data) {
    auto* r = static_cast<Receive*>(user_data);
    if (status == UCS_OK) r->self->deliver(r->peer, r->header, r->payload);
    r->self->give_back(std::move(r->payload));
    delete r;
    ucp_request_free(request);
  }
  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                            const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Impl*>(arg);
    PeerId peer = 0;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
      if (auto it = self->peers.find(param->reply_ep); it != self->peers.end()) peer = it->second;
    const auto* h = static_cast<const uint8_t*>(header);
    if (length > self->options.max_message_bytes) {  // a hostile or broken peer: cut it off
      if (peer) self->drop_peer(peer, "a message of " + std::to_string(length) + " bytes is over the limit");
      return UCS_OK;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
      auto* r = new Receive{self, peer, std::vector<uint8_t>(h, h + header_length), self->take_buffer(length)};
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = &Impl::on_received;
      p.user_data = r;
      void* req = ucp_am_recv_data_nbx(self->worker, data, r->payload.data(), length, &p);
      if (req == nullptr) {
        self->deliver(peer, r->header, r->payload);
        self->give_back(std::move(r->payload));
        delete r;
      } else if (UCS_PTR_IS_ERR(req)) {
        self->give_back(std::move(r->payload));
        delete r;
      }
      return UCS_OK;
    }
    self->deliver(peer, std::span<const uint8_t>(h, header_length),
                  std::span<const uint8_t>(static_cast<const uint8_t*>(data), length));
    return UCS_OK;
  }

  struct Send {
    std::vector<uint8_t> header;
    std::shared_ptr<const std::vector<uint8_t>> payload;
    std::function<void(Status)> done;
    Impl* node = nullptr;
  };
  // Sends handed to UCX and not completed yet (progress thread only): settled at shutdown if UCX
  // never completes them, so no caller waits forever and nothing leaks.
  std::unordered_set<Send*> in_flight;
  static void on_sent(void* request, ucs_status_t status, void* user_data) {
    auto* s = static_cast<Send*>(user_data);
    s->node->in_flight.erase(s);
    if (s->done) s->done(status == UCS_OK ? Status{} : Status(ucx_error("KV send", status)));
    delete s;
    ucp_request_free(request);
  }
  void settle_in_flight() {
    for (Send* s : in_flight) {
      if (s->done) s->done(Error{"KV send: the node stopped", ErrorCode::unavailable});
      delete s;
    }
    in_flight.clear();
  }

  void loop() {
    while (!stop) {
      std::vector<std::function<void()>> work;
      {
        std::lock_guard<std::mutex> lock(mutex);
        work.swap(posted);
      }
      for (auto& fn : work) fn();
      while (ucp_worker_progress(worker) != 0) {
      }
      if (!posted_empty()) continue;
      const ucs_status_t armed = ucp_worker_arm(worker);
      if (armed == UCS_ERR_BUSY) continue;
      pollfd fds[2] = {{worker_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
      (void)poll(fds, 2, 20);  // also a tick: nothing waits on a wakeup that was missed
      if (fds[1].revents & POLLIN) {
        uint64_t n;
        (void)!read(wake_fd, &n, sizeof(n));
      }
    }
    // Shutdown: what was posted still runs (sends then fail or go), every endpoint is closed at
    // once, then a little progress for the closes.
    std::vector<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> lock(mutex);
      work.swap(posted);
    }
    for (auto& fn : work) fn();
    for (auto& [id, ep] : eps) close_ep(ep);
    eps.clear();
    peers.clear();
    for (int i = 0; i < 100; ++i) ucp_worker_progress(worker);
  }
  bool posted_empty() {
    std::lock_guard<std::mutex> lock(mutex);
    return posted.empty();
  }
};

UcxNode::UcxNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UcxNode::~UcxNode() {
  impl_->stop = true;
  impl_->post([] {});
  if (impl_->thread.joinable()) impl_->thread.join();
}

// Everything UCX is created on the progress thread: a worker's async context belongs to the
// thread that made it.
Status UcxNode::Impl::init() {
  // Client-server endpoints are wired up over TCP sockets; without the tcp transport UCX 1.13
  // fails the endpoint on an assertion (abort) instead of an error.
  if (const char* tls = std::getenv("UCX_TLS"); tls && *tls) {
    const std::string t = tls;
    const bool excluded = t[0] == '^' ? t.find("tcp") != std::string::npos
                                      : t.find("tcp") == std::string::npos && t.find("all") == std::string::npos;
    if (excluded)
      return Error{"UCX_TLS=" + t + " leaves out tcp, which KV connections need for their set-up; add tcp",
                   ErrorCode::invalid_argument};
  }
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) return ucx_error("UCX configuration", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  const ucs_status_t init = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (init != UCS_OK) return ucx_error("UCX init", init);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  if (ucs_status_t s = ucp_worker_create(context, &wp, &worker); s != UCS_OK) return ucx_error("UCX worker", s);
  if (ucs_status_t s = ucp_worker_get_efd(worker, &worker_fd); s != UCS_OK) return ucx_error("UCX worker fd", s);
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kAmId;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = &Impl::on_am;
  hp.arg = this;
  if (ucs_status_t s = ucp_worker_set_am_recv_handler(worker, &hp); s != UCS_OK) return ucx_error("UCX AM handler", s);
  if (options.listen_host.empty()) return {};
  auto addr = resolve(options.listen_host, options.listen_port);
  if (!addr) return Error{addr.error(), addr.error_code()};
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*addr);
  lp.sockaddr.addrlen = addr_len(*addr);
  lp.conn_handler.cb = &Impl::on_connection;
  lp.conn_handler.arg = this;
  if (ucs_status_t s = ucp_listener_create(worker, &lp, &listener); s != UCS_OK)
    return ucx_error("UCX listener on " + options.listen_host + ":" + std::to_string(options.listen_port), s);
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (ucs_status_t s = ucp_listener_query(listener, &attr); s != UCS_OK) return ucx_error("UCX listener query", s);
  port = attr.sockaddr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&attr.sockaddr)->sin6_port)
                                             : ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  return {};
}

void UcxNode::Impl::teardown() {
  if (listener) ucp_listener_destroy(listener);
  if (worker) ucp_worker_destroy(worker);
  settle_in_flight();  // the worker is gone: no completion comes any more
  if (context) ucp_cleanup(context);
  listener = nullptr;
  worker = nullptr;
  context = nullptr;
}

Result<std::unique_ptr<UcxNode>> UcxNode::create(const UcxOptions& options, UcxCallbacks callbacks) {
  auto m = std::make_unique<Impl>();
  m->options = options;
  m->callbacks = std::move(callbacks);
  m->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m->wake_fd < 0) return Error{"eventfd failed", ErrorCode::internal};
  std::promise<Status> ready;
  auto started = ready.get_future();
  Impl* raw = m.get();
  m->thread = std::thread([raw, &ready] {
    Status s = raw->init();
    const bool ok = s.ok();
    if (!ok) raw->teardown();
    ready.set_value(std::move(s));
    if (ok) {
      raw->loop();
      raw->teardown();
    }
  });
  Status s = started.get();
  if (!s) {
    m->thread.join();
    return Error{s.error(), s.error_code()};
  }
  return std::unique_ptr<UcxNode>(new UcxNode(std::move(m)));
}

uint16_t UcxNode::port() const { return impl_->port; }

Result<PeerId> UcxNode::connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  auto addr = resolve(host, port);
  if (!addr) return Error{addr.error(), addr.error_code()};
  if (!tcp_reachable(*addr, timeout))
    return Error{"nothing accepts KV transfers at " + host + ":" + std::to_string(port), ErrorCode::unavailable};
  // The connection is up once a flush of the new endpoint completes.
  auto result = std::make_shared<std::promise<Result<PeerId>>>();
  auto future = result->get_future();
  auto settled = std::make_shared<std::atomic<bool>>(false);
  auto settle = [result, settled](Result<PeerId> r) {
    if (!settled->exchange(true)) result->set_value(std::move(r));
  };
  struct Flush {
    Impl* self;
    PeerId peer;
    std::function<void(Result<PeerId>)> settle;
  };
  impl_->post([m = impl_.get(), a = *addr, host, port, settle] {
    ucp_ep_params_t p = m->ep_params();
    p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
    p.sockaddr.addrlen = addr_len(a);
    ucp_ep_h ep = nullptr;
    if (ucs_status_t s = ucp_ep_create(m->worker, &p, &ep); s != UCS_OK)
      return settle(ucx_error("connecting to " + host + ":" + std::to_string(port), s));
    const PeerId id = m->add_peer(ep);
    auto* f = new Flush{m, id, settle};
    ucp_request_param_t fp{};
    fp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    fp.user_data = f;
    fp.cb.send = [](void* request, ucs_status_t status, void* user_data) {
      auto* f = static_cast<Flush*>(user_data);
      if (status == UCS_OK) f->settle(f->peer);
      else {
        f->settle(ucx_error("connecting", status));
        f->self->drop_peer(f->peer, ucs_status_string(status));
      }
      delete f;
      ucp_request_free(request);
    };
    void* r = ucp_ep_flush_nbx(ep, &fp);
    if (r == nullptr) {
      settle(id);
      delete f;
    } else if (UCS_PTR_IS_ERR(r)) {
      settle(ucx_error("connecting to " + host + ":" + std::to_string(port), UCS_PTR_STATUS(r)));
      m->drop_peer(id, "connect failed");
      delete f;
    }
  });
  if (future.wait_for(timeout) != std::future_status::ready) {
    settle(Error{"connecting to " + host + ":" + std::to_string(port) + " timed out", ErrorCode::unavailable});
    return future.get();  // the late flush (if any) drops nothing the caller holds
  }
  return future.get();
}

void UcxNode::send(PeerId peer, std::vector<uint8_t> header, std::shared_ptr<const std::vector<uint8_t>> payload,
                   std::function<void(Status)> done) {
  auto* s = new Impl::Send{std::move(header), std::move(payload), std::move(done), impl_.get()};
  impl_->post([m = impl_.get(), peer, s] {
    auto it = m->eps.find(peer);
    if (it == m->eps.end()) {
      if (s->done) s->done(Error{"KV send: the peer is not connected", ErrorCode::unavailable});
      delete s;
      return;
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    p.cb.send = &Impl::on_sent;
    p.user_data = s;
    const void* data = s->payload ? s->payload->data() : nullptr;
    const size_t n = s->payload ? s->payload->size() : 0;
    void* r = ucp_am_send_nbx(it->second, kAmId, s->header.data(), s->header.size(), data, n, &p);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) m->in_flight.insert(s);
    if (r == nullptr) {
      if (s->done) s->done({});
      delete s;
    } else if (UCS_PTR_IS_ERR(r)) {
      if (s->done) s->done(ucx_error("KV send", UCS_PTR_STATUS(r)));
      delete s;
    }
  });
}

void UcxNode::disconnect(PeerId peer) {
  impl_->post([m = impl_.get(), peer] { m->drop_peer(peer, "disconnected"); });
}

}  // namespace kvasir::disagg
