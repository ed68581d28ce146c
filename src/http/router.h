// Method + path -> handler, with the checks every route shares: 404 for an unknown path, 405 with
// `Allow` for a wrong method, 415 for a JSON route sent another media type, and hooks for the
// server's access checks (before) and response decoration (after). It is the transport's Service.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "http/message.h"
#include "http/service.h"

namespace kvasir::http {

using Handler = std::function<void(const Request&, Response&)>;

enum class Run {
  io_thread,  // quick and non-blocking (health, metrics): answered without waiting for a worker
  worker,     // may block (tokenizing, generation): runs on a worker thread
};

struct RouteOptions {
  Run run = Run::worker;
  // The body must be JSON: Content-Type absent, application/json, or curl's default form type
  // (browsers send that only with an Origin, which the access checks see); else 415.
  bool json_body = false;
};

class Router : public Service {
 public:
  // Answers a request before routing (returns true), e.g. 401 or a CORS preflight.
  using Filter = std::function<bool(Request&, Response&)>;
  // Adjusts every response before it is sent (e.g. CORS headers).
  using Finisher = std::function<void(const Request&, Response&)>;
  // Builds an error response: status, message, machine-readable code.
  using ErrorBuilder = std::function<Response(int status, const std::string& message, const std::string& code)>;

  void add(const std::string& method, const std::string& path, Handler handler, RouteOptions options = {});
  void set_filter(Filter f) { filter_ = std::move(f); }
  void set_finisher(Finisher f) { finisher_ = std::move(f); }
  void set_error_builder(ErrorBuilder b) { error_builder_ = std::move(b); }

  // The methods `path` answers, "GET, POST"; "" for an unknown path.
  std::string allowed_methods(const std::string& path) const;

  bool handle_inline(Request& req, Response& res) override;
  void handle(Request& req, Response& res) override;
  Response error(int status, const std::string& message, const std::string& code) override;

 private:
  struct Route {
    Handler handler;
    RouteOptions options;
  };
  const Route* find(const Request& req) const;
  void finish(const Request& req, Response& res) const;

  std::map<std::string, std::map<std::string, Route>> routes_;  // path -> method -> route
  Filter filter_;
  Finisher finisher_;
  ErrorBuilder error_builder_;
};

}  // namespace kvasir::http
