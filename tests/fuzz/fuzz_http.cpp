// libFuzzer target: the HTTP/1.1 request parser (Beast's, with the server's limits) on arbitrary
// bytes, as a socket would deliver them: possibly several pipelined requests, chunked bodies,
// split anywhere. It must never crash or accept more than the limits; every outcome is a
// request, "need more", or a failure with a status.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "http/request_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvasir::http::ParseResult;
  kvasir::http::Limits limits{.max_header_bytes = 4096, .max_body_bytes = 16384};
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 64 && !rest.empty(); ++i) {
    ParseResult r = kvasir::http::parse_request(rest, limits);
    if (r.consumed > rest.size()) std::abort();
    if (r.kind == ParseResult::Kind::failed) {
      const int s = r.failure.status;
      if (s != 0 && s != 400 && s != 413 && s != 431) std::abort();
      break;
    }
    if (r.kind == ParseResult::Kind::incomplete) break;
    if (r.request.body.size() > limits.max_body_bytes) std::abort();
    if (r.request.path.find('?') != std::string::npos) std::abort();
    if (r.consumed == 0) std::abort();  // a complete request uses bytes
    rest.remove_prefix(r.consumed);
  }
  return 0;
}
