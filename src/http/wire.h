// The one place that turns HTTP/1.1 bytes into a Request: Boost.Beast's parser with our limits.
// Shared by the transport (reading from a socket) and parse_request (bytes in memory: tests, fuzz).
#pragma once
#include <boost/beast/http.hpp>

#include "http/message.h"
#include "http/request_parser.h"

namespace kvasir::http::wire {

using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

void configure(Parser& parser, const Limits& limits);
// The parsed message as a Request (the parser is left empty).
Request to_request(Parser& parser);
// What to answer for a read error: a status with a message, or status 0 to close silently (the
// client went away or sent nothing in time).
ParseFailure classify(const boost::system::error_code& ec);
// Whether the request asked for "100 Continue" before sending its body.
bool expects_continue(const Parser& parser);

}  // namespace kvasir::http::wire
