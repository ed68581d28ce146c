#include "hub/download.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "hub/model_ref.h"

namespace kvasir::hub {

namespace fs = std::filesystem;

namespace {

// A 64-digit hex string (optionally quoted, W/-prefixed) is a SHA-256, as Hugging Face's
// X-Linked-Etag and its LFS ETags are; anything else says nothing.
std::string sha256_in(std::string v) {
  if (v.starts_with("W/")) v = v.substr(2);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  if (v.size() != 64 || !std::all_of(v.begin(), v.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
    return {};
  std::transform(v.begin(), v.end(), v.begin(), [](char c) { return char(std::tolower(static_cast<unsigned char>(c))); });
  return v;
}

uint64_t to_u64(const std::string& s) {
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return 0;
    v = v * 10 + uint64_t(c - '0');
  }
  return v;
}

std::unique_ptr<httplib::Client> client_for(const Url& u) {
  auto c = std::make_unique<httplib::Client>(u.host_port);
  c->set_connection_timeout(10);
  c->set_read_timeout(60);
  c->set_write_timeout(30);
  return c;
}

// What the server says about the file before the download: the final URL after redirects, its
// size and checksum when announced (any hop may carry them; Hugging Face's first one does).
struct Probe {
  std::string url;
  uint64_t size = 0;
  std::string sha256;
};

// Credentials go only where they were given: the same scheme, host and port (a redirect to a
// CDN, or to another port of the same host, gets none).
const httplib::Headers& auth_for(const Url& u, const Url& first, const httplib::Headers& auth) {
  static const httplib::Headers kNone;
  return u.host_port == first.host_port ? auth : kNone;
}

// A Location header against the URL that sent it.
std::string resolve_location(const Url& from, const std::string& location) {
  return location.starts_with("/") ? from.host_port + location : location;
}

constexpr int kMaxRedirects = 8;

Result<Probe> probe(const std::string& url, const httplib::Headers& auth, const Url& first) {
  Probe p{url};
  for (int hop = 0; hop < kMaxRedirects; ++hop) {
    auto u = parse_url(p.url);
    if (!u) return Error{u.error(), ErrorCode::invalid_argument};
    auto c = client_for(*u);
    c->set_follow_location(false);
    auto r = c->Head(u->target, auth_for(*u, first, auth));
    if (!r) return Error{"cannot reach " + u->host_port + ": " + httplib::to_string(r.error()), ErrorCode::unavailable};
    for (const char* h : {"X-Linked-Etag", "ETag"})
      if (p.sha256.empty() && r->has_header(h)) p.sha256 = sha256_in(r->get_header_value(h));
    if (r->has_header("X-Linked-Size")) p.size = to_u64(r->get_header_value("X-Linked-Size"));
    if (r->status >= 300 && r->status < 400 && r->has_header("Location")) {
      p.url = resolve_location(*u, r->get_header_value("Location"));
      continue;
    }
    if (r->status == 405 || r->status == 501) return p;  // no HEAD here: the GET will tell
    if (r->status == 401 || r->status == 403)
      return Error{p.url + ": HTTP " + std::to_string(r->status) + " (a gated or private file? set HF_TOKEN)",
                   ErrorCode::invalid_argument};
    if (r->status == 404) return Error{p.url + ": not found (HTTP 404)", ErrorCode::not_found};
    if (r->status != 200) return Error{p.url + ": HTTP " + std::to_string(r->status), ErrorCode::unavailable};
    if (!p.size && r->has_header("Content-Length")) p.size = to_u64(r->get_header_value("Content-Length"));
    return p;
  }
  return Error{url + ": too many redirects", ErrorCode::unavailable};
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

Result<std::string> sha256_file(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) return Error{"cannot read " + path};
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return Error{"sha256 unavailable", ErrorCode::internal};
  std::vector<unsigned char> buf(1 << 20);
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0;) EVP_DigestUpdate(ctx.get(), buf.data(), n);
  if (std::ferror(f.get())) return Error{"read error on " + path};
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += {kHex[md[i] >> 4], kHex[md[i] & 15]};
  return hex;
}

Result<DownloadResult> download(const std::string& url, const std::string& dest, const DownloadOptions& o) {
  auto first = parse_url(url);
  if (!first) return Error{first.error(), ErrorCode::invalid_argument};
  httplib::Headers auth;
  if (!o.bearer_token.empty()) auth.emplace("Authorization", "Bearer " + o.bearer_token);
  auto pr = probe(url, auth, *first);
  if (!pr) return Error{pr.error(), pr.error_code()};
  const std::string expected = !o.expected_sha256.empty() ? o.expected_sha256 : pr->sha256;
  auto target = parse_url(pr->url);
  if (!target) return Error{target.error(), ErrorCode::invalid_argument};

  std::error_code ec;
  fs::create_directories(fs::path(dest).parent_path(), ec);
  if (ec) return Error{"cannot create " + fs::path(dest).parent_path().string() + ": " + ec.message()};
  const std::string part = dest + ".part";
  uint64_t offset = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
  DownloadResult out;
  out.resumed = offset > 0;
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(part.c_str(), "ab"));
  if (!f) return Error{"cannot write " + part};
  uint64_t total = pr->size;
  // A failure that resuming cannot mend (an HTTP error, more bytes than announced, the wrong
  // size) removes the partial file; a cut connection keeps it for the next run.
  auto hard_failure = [&](std::string message, ErrorCode code = ErrorCode::unavailable) {
    f.reset();
    fs::remove(part, ec);
    return Error{std::move(message) + " (the partial file was removed)", code};
  };
  int failures = 0, redirects = 0;
  for (;;) {
    ++out.connections;
    auto c = client_for(*target);
    // Redirects are followed here, not by the client, which would send the credentials along.
    c->set_follow_location(false);
    httplib::Headers h = auth_for(*target, *first, auth);
    if (offset > 0) h.emplace("Range", "bytes=" + std::to_string(offset) + "-");
    std::string refusal;   // set when the server's answer ends the download
    std::string redirect;  // set when it points elsewhere
    const uint64_t at_start = offset;
    // The file's size as this response gives it: it must be the one announced before, if any.
    auto sized = [&](uint64_t n) {
      if (total > 0 && n != total) {
        refusal = "the server sends " + std::to_string(n) + " bytes, " + std::to_string(total) + " were announced";
        return false;
      }
      total = n;
      return true;
    };
    auto r = c->Get(
        target->target, h,
        [&](const httplib::Response& res) {
          if (res.status >= 300 && res.status < 400 && res.has_header("Location")) {
            redirect = resolve_location(*target, res.get_header_value("Location"));
            return false;
          }
          if (res.status == 206) {
            // Content-Range: bytes START-END/TOTAL; START must be where the file ends.
            const std::string cr = res.get_header_value("Content-Range");
            const size_t dash = cr.find('-'), slash = cr.find('/');
            if (!cr.starts_with("bytes ") || dash == std::string::npos || to_u64(cr.substr(6, dash - 6)) != offset) {
              refusal = "the server resumed at another offset (" + cr + ")";
              return false;
            }
            if (slash != std::string::npos && cr.substr(slash + 1) != "*") return sized(to_u64(cr.substr(slash + 1)));
            return true;
          }
          if (res.status == 200) {
            if (offset > 0) {  // the server ignored the Range: start over
              f.reset(std::fopen(part.c_str(), "wb"));
              offset = 0;
              out.resumed = false;
              if (!f) refusal = "cannot rewrite " + part;
            }
            if (res.has_header("Content-Length") && !sized(to_u64(res.get_header_value("Content-Length")))) return false;
            return bool(f);
          }
          if (res.status == 416 && total > 0 && offset == total) return true;  // nothing left
          refusal = "HTTP " + std::to_string(res.status);
          return false;
        },
        [&](const char* data, size_t n) {
          if (total > 0 && offset + n > total) {
            refusal = "the server sent more than the " + std::to_string(total) + " bytes it announced";
            return false;
          }
          if (std::fwrite(data, 1, n, f.get()) != n) {
            refusal = "write error on " + part;
            return false;
          }
          offset += n;
          if (o.progress) o.progress(offset, total);
          return true;
        });
    if (!redirect.empty()) {
      auto next = parse_url(redirect);
      if (!next) return Error{next.error(), ErrorCode::invalid_argument};
      if (++redirects > kMaxRedirects) return Error{url + ": too many redirects", ErrorCode::unavailable};
      target = std::move(next);
      continue;
    }
    if (!refusal.empty()) return hard_failure(pr->url + ": " + refusal);
    const bool complete = r && (r->status == 200 || r->status == 206 || r->status == 416) && (total == 0 || offset >= total);
    if (complete) break;
    if (r && r->status >= 400 && r->status != 416) return hard_failure(pr->url + ": HTTP " + std::to_string(r->status));
    // A cut connection: go on from where the file ends; only attempts that brought nothing count.
    if (offset == at_start && ++failures >= o.max_attempts)
      return Error{pr->url + ": " + (r ? "the connection ended early" : httplib::to_string(r.error())) + " (" +
                       std::to_string(failures) + " attempts; run again to resume from " + std::to_string(offset) +
                       " bytes)",
                   ErrorCode::unavailable};
    std::fflush(f.get());
    std::this_thread::sleep_for(std::chrono::milliseconds(o.retry_delay_ms * std::max(failures, 1)));
  }
  if (std::fflush(f.get()) != 0) return Error{"write error on " + part};
  f.reset();
  out.bytes = fs::file_size(part, ec);
  if (total > 0 && out.bytes != total)
    return hard_failure(pr->url + ": got " + std::to_string(out.bytes) + " bytes, the server announced " +
                        std::to_string(total));
  auto sum = sha256_file(part);
  if (!sum) return Error{sum.error()};
  out.sha256 = *sum;
  if (!expected.empty()) {
    if (*sum != expected) {
      fs::remove(part, ec);
      return Error{pr->url + ": checksum mismatch: expected sha256 " + expected + ", got " + *sum + " (the file was removed)",
                   ErrorCode::invalid_argument};
    }
    out.verified = true;
  }
  fs::rename(part, dest, ec);
  if (ec) return Error{"cannot move the download to " + dest + ": " + ec.message()};
  return out;
}

}  // namespace kvasir::hub
