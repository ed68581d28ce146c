#include "http/request_parser.h"

#include "http/wire.h"

namespace kvasir::http {

namespace beast_http = boost::beast::http;

namespace wire {

void configure(Parser& parser, const Limits& limits) {
  parser.header_limit(std::uint32_t(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
  parser.body_limit(std::uint64_t(limits.max_body_bytes));
}

Request to_request(Parser& parser) {
  auto msg = parser.release();
  Request r;
  r.method = std::string(msg.method_string());
  r.target = std::string(msg.target());
  r.path = r.target.substr(0, r.target.find('?'));
  for (const auto& field : msg) r.headers.add(std::string(field.name_string()), std::string(field.value()));
  r.keep_alive = msg.keep_alive();
  r.body = std::move(msg.body());
  return r;
}

ParseFailure classify(const boost::system::error_code& ec) {
  if (ec == beast_http::error::body_limit) return {413, "the request body exceeds the server's limit"};
  if (ec == beast_http::error::header_limit || ec == beast_http::error::buffer_overflow)
    return {431, "the request line and headers exceed the server's limit"};
  const bool cut_short = ec == beast_http::error::end_of_stream || ec == beast_http::error::partial_message ||
                         ec == beast_http::error::need_more || ec == beast_http::error::short_read;
  if (ec.category() == make_error_code(beast_http::error::bad_method).category() && !cut_short)
    return {400, "malformed HTTP request: " + ec.message()};
  return {0, ec.message()};  // eof, reset, timeout, half a message
}

bool expects_continue(const Parser& parser) {
  const auto& h = parser.get();
  auto it = h.find(beast_http::field::expect);
  return it != h.end() && iequals(it->value(), "100-continue");
}

}  // namespace wire

ParseResult parse_request(std::string_view bytes, const Limits& limits) {
  ParseResult out;
  wire::Parser parser;
  wire::configure(parser, limits);
  parser.eager(true);
  boost::system::error_code ec;
  size_t used = 0;
  // put() may take less than it is offered; feed the rest until it needs more or is done.
  while (used < bytes.size() && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == beast_http::error::need_more) {
      ec = {};
      if (n == 0) break;
      continue;
    }
    if (ec) break;
    if (n == 0) break;
  }
  out.consumed = used;
  if (ec) {
    out.kind = ParseResult::Kind::failed;
    out.failure = wire::classify(ec);
    return out;
  }
  if (!parser.is_done()) return out;  // incomplete
  out.kind = ParseResult::Kind::complete;
  out.request = wire::to_request(parser);
  return out;
}

}  // namespace kvasir::http
