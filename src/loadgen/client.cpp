#include "loadgen/client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace kvasir::loadgen {

namespace {

using SteadyClock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string api_error_text(int status, const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return "HTTP " + std::to_string(status) + ": " + j["error"]["message"].get<std::string>();
  }
  return "HTTP " + std::to_string(status) + ": " + body.substr(0, 200);
}

// A keep-alive connection the server closed while idle (llama-server and others time them out
// silently) fails the next request before any byte comes back: that request never reached the
// server, so it is sent once more on a fresh connection.
bool stale_connection(httplib::Error e) {
  return e == httplib::Error::Read || e == httplib::Error::Write || e == httplib::Error::Connection;
}

template <typename Call>
httplib::Result with_retry(Call call) {
  httplib::Result r = call();
  if (!r && stale_connection(r.error())) r = call();
  return r;
}

}  // namespace

Result<std::pair<std::string, std::string>> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || url.compare(0, scheme, "http") != 0)
    return Error{"--url must look like http://HOST:PORT, got '" + url + "'"};
  const size_t path = url.find('/', scheme + 3);
  std::string base = url.substr(0, path);
  std::string prefix = path == std::string::npos ? "" : url.substr(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0) prefix.resize(prefix.size() - 3);
  return std::make_pair(base, prefix);
}

Client::Client(const ClientOptions& options) : options_(options) {
  auto parts = split_url(options.url);
  const std::string base = parts ? parts->first : options.url;
  prefix_ = parts ? parts->second : "";
  http_ = std::make_unique<httplib::Client>(base);
  http_->set_keep_alive(true);
  http_->set_connection_timeout(10);
  const auto t = std::chrono::duration<double>(options.timeout_s);
  http_->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
  http_->set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
  if (!options.api_key.empty()) http_->set_bearer_token_auth(options.api_key);
}

Client::~Client() = default;

Result<std::string> Client::first_model() {
  auto res = with_retry([&] { return http_->Get(prefix_ + "/v1/models"); });
  if (!res) return Error{"GET /v1/models: " + httplib::to_string(res.error())};
  if (res->status != 200) return Error{"GET /v1/models: " + api_error_text(res->status, res->body)};
  auto j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id"))
    return Error{"GET /v1/models: no model listed"};
  return j["data"][0]["id"].get<std::string>();
}

Result<std::vector<int32_t>> Client::tokenize(const std::string& text) {
  // vLLM's and kvasir's shape first, then llama-server's ({"content", "add_special"}; it answers
  // the other shape with no tokens at all).
  std::string last_error;
  for (const json& body : {json{{"prompt", text}, {"add_special_tokens", false}},
                           json{{"content", text}, {"add_special", false}}}) {
    auto res = with_retry([&] { return http_->Post(prefix_ + "/tokenize", body.dump(), "application/json"); });
    if (!res) return Error{"POST /tokenize: " + httplib::to_string(res.error())};
    if (res->status != 200) {
      last_error = "POST /tokenize: " + api_error_text(res->status, res->body);
      continue;
    }
    auto j = json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
      last_error = "POST /tokenize: no tokens in the answer";
      continue;
    }
    std::vector<int32_t> ids;
    for (const auto& t : j["tokens"]) {
      // llama-server may answer {"id", "piece"} objects when asked for pieces.
      if (t.is_number_integer()) ids.push_back(t.get<int32_t>());
      else if (t.is_object() && t.contains("id") && t["id"].is_number_integer()) ids.push_back(t["id"].get<int32_t>());
    }
    if (ids.empty() && !text.empty()) {
      last_error = "POST /tokenize: no tokens for a non-empty text";
      continue;
    }
    return ids;
  }
  return Error{last_error};
}

std::string Client::body_for(const RequestSpec& spec, const std::string& model) const {
  json b;
  if (!model.empty()) b["model"] = model;
  if (options_.endpoint == Endpoint::chat) {
    b["messages"] = spec.messages.is_array() ? spec.messages
                                             : json::array({json{{"role", "user"}, {"content", spec.prompt_text}}});
  } else if (!spec.prompt_ids.empty()) {
    b["prompt"] = spec.prompt_ids;
  } else {
    b["prompt"] = spec.prompt_text;
  }
  b["max_tokens"] = spec.output_len;
  b["temperature"] = options_.temperature;
  b["ignore_eos"] = options_.ignore_eos;
  b["stream"] = true;
  b["stream_options"] = json{{"include_usage", true}};
  return b.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

RequestOutcome Client::send(const RequestSpec& spec, const std::string& model, SteadyClock::time_point run_start) {
  RequestOutcome o;
  o.input_tokens = spec.input_len;
  httplib::Request req;
  req.method = "POST";
  req.path = prefix_ + (options_.endpoint == Endpoint::chat ? "/v1/chat/completions" : "/v1/completions");
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  if (!options_.api_key.empty()) req.set_header("Authorization", "Bearer " + options_.api_key);
  req.body = body_for(spec, model);

  int status = 0;
  std::string error_body;
  SseParser parser;
  int64_t text_chunks = 0;
  bool usage_seen = false;
  SteadyClock::time_point last;
  const auto t0 = SteadyClock::now();
  o.start_s = seconds(t0 - run_start);
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const auto now = SteadyClock::now();
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    parser.feed(data, n, [&](std::string_view payload) {
      if (payload == "[DONE]") return;
      auto j = json::parse(payload, nullptr, false);
      if (j.is_discarded() || !j.is_object()) return;
      if (j.contains("usage") && j["usage"].is_object()) {
        usage_seen = true;
        o.output_tokens = j["usage"].value("completion_tokens", int64_t(0));
        o.input_tokens = j["usage"].value("prompt_tokens", o.input_tokens);
      }
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
      const json& c = j["choices"][0];
      std::string piece;
      if (c.contains("text") && c["text"].is_string()) piece = c["text"];
      else if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
        piece = c["delta"]["content"];
      if (piece.empty()) return;
      if (text_chunks == 0) o.ttft_s = seconds(now - t0);
      else o.itl_s.push_back(seconds(now - last));
      last = now;
      ++text_chunks;
      o.text += piece;
    });
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = http_->send(req, res, err);
  if (!sent && status == 0 && text_chunks == 0 && stale_connection(err)) {  // see stale_connection
    err = httplib::Error::Success;
    sent = http_->send(req, res, err);
  }
  o.latency_s = seconds(SteadyClock::now() - t0);
  o.http_status = status;
  if (!sent) {
    o.error = "transport: " + httplib::to_string(err);
  } else if (status != 200) {
    o.error = api_error_text(status, error_body);
  } else if (text_chunks == 0 && (!usage_seen || o.output_tokens > 0)) {
    o.error = "the stream carried no text";
  } else {
    o.success = true;
    if (!usage_seen) o.output_tokens = text_chunks;
  }
  return o;
}

}  // namespace kvasir::loadgen
