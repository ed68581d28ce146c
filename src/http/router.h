// Method + path -> handler, and the one admission path every request takes before any handler:
//   1. screen        (I/O thread, every request)   Host, Origin, CORS preflight
//   2. route         (I/O thread)                  404 unknown path, 405 wrong method
//   3. authenticate  (I/O thread, every route but those registered Auth::open; unknown paths too)
//   4. media type    (I/O thread, json_body routes) 415
//   5. body          (worker, json_body routes)    the server's depth pre-scan and parse (400)
// then the handler, then the finisher (response decoration). The body's size is bounded earlier,
// by the transport (413). A route cannot skip a step: the table decides, not the handler. It is
// the transport's Service.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "http/message.h"
#include "http/service.h"

namespace kvasir::http {

using Handler = std::function<void(const Request&, Response&)>;

enum class Run {
  io_thread,  // quick and non-blocking (health, metrics): answered without waiting for a worker
  worker,     // may block (tokenizing, generation): runs on a worker thread
};

enum class Auth {
  key,   // the server's API key is required when it has any (the default)
  open,  // answered without one: only what computes and reveals nothing (health, the static page)
};

struct RouteOptions {
  Run run = Run::worker;
  // The body must be JSON: Content-Type absent, application/json, or curl's default form type
  // (browsers send that only with an Origin, which the access checks see); else 415. The body
  // check (set_admission) then parses it before the handler runs.
  bool json_body = false;
  Auth auth = Auth::key;
};

// One row of the route table, for tests and documentation.
struct RouteInfo {
  std::string method;
  std::string path;
  RouteOptions options;
};

class Router : public Service {
 public:
  // One admission step: answers the request (returns true: 400, 401, a CORS preflight) or lets it on.
  using Filter = std::function<bool(Request&, Response&)>;
  // Adjusts every response before it is sent (e.g. CORS headers).
  using Finisher = std::function<void(const Request&, Response&)>;
  // Builds an error response: status, message, machine-readable code.
  // `path`: the request's, where there is one (an API can shape its errors by route family).
  using ErrorBuilder = std::function<Response(int status, const std::string& message, const std::string& code,
                                              std::string_view path)>;

  // The admission steps the server supplies; each answers (returns true) or lets the request on.
  struct Admission {
    Filter screen;        // every request, first
    Filter authenticate;  // every request to a route that is not Auth::open, and to unknown paths
    Filter body;          // json_body routes, on the thread that runs the handler, just before it
    // Worker routes, once the handler returned: e.g. give back the memory a large request used.
    std::function<void(const Request&)> done;
  };

  void add(const std::string& method, const std::string& path, Handler handler, RouteOptions options = {});
  void set_admission(Admission a) { admission_ = std::move(a); }
  void set_finisher(Finisher f) { finisher_ = std::move(f); }
  void set_error_builder(ErrorBuilder b) { error_builder_ = std::move(b); }

  // The methods `path` answers, "GET, HEAD, POST" (HEAD wherever GET: the same answer without its
  // body); "" for an unknown path.
  std::string allowed_methods(const std::string& path) const;
  // Every registered route, sorted by path then method.
  std::vector<RouteInfo> routes() const;

  bool handle_inline(Request& req, Response& res) override;
  void handle(Request& req, Response& res) override;
  Response error(int status, const std::string& message, const std::string& code) override;
  Response error_at(std::string_view path, int status, const std::string& message, const std::string& code);

 private:
  struct Route {
    Handler handler;
    RouteOptions options;
  };
  const Route* find(const Request& req) const;
  void finish(const Request& req, Response& res) const;
  // The body check (json_body routes), then the handler unless the check answered.
  void run(const Route& route, Request& req, Response& res) const;

  std::map<std::string, std::map<std::string, Route>> routes_;  // path -> method -> route
  Admission admission_;
  Finisher finisher_;
  ErrorBuilder error_builder_;
};

}  // namespace kvasir::http
