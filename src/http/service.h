// What the transport serves: it parses requests off the wire and hands them here, first on its
// I/O thread (which must never block), then, if that did not answer, on a worker thread.
#pragma once
#include <string>

#include "http/message.h"

namespace kvasir::http {

class Service {
 public:
  virtual ~Service() = default;
  // On the I/O thread, without blocking: fills `res` and returns true, or returns false to have
  // handle() called on a worker thread.
  virtual bool handle_inline(Request& req, Response& res) = 0;
  virtual void handle(Request& req, Response& res) = 0;
  // A response for what the transport finds itself: 400 malformed, 413 body too large, 431
  // headers too large, 503 overloaded.
  virtual Response error(int status, const std::string& message, const std::string& code) = 0;
};

}  // namespace kvasir::http
