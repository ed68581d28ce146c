// Limits on what one request may send, and a parser of requests held in memory (the transport
// uses the same parser configuration on its sockets; this entry point is for tests and fuzzing).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "http/message.h"

namespace kvasir::http {

struct Limits {
  size_t max_header_bytes = 32u << 10;  // request line + header fields; beyond: 431
  size_t max_body_bytes = 8u << 20;     // after de-chunking; beyond: 413
};

struct ParseFailure {
  int status = 0;  // 400, 413, 431; 0: nothing to answer (the connection just ends)
  std::string message;
};

struct ParseResult {
  enum class Kind { complete, incomplete, failed } kind = Kind::incomplete;
  Request request;       // when complete
  size_t consumed = 0;   // bytes of the input the request used (pipelined data may follow)
  ParseFailure failure;  // when failed
};

ParseResult parse_request(std::string_view bytes, const Limits& limits);

}  // namespace kvasir::http
