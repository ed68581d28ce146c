// Downloading one file over HTTP(S) into place: into FILE.part first, resumed with a Range request
// after a cut connection (automatically, and by a later run), then checked (the size the server
// announced, and SHA-256: the caller's, else the server's as Hugging Face sends it in
// X-Linked-Etag / ETag) and renamed. A mismatch, an HTTP error or more bytes than announced
// removes the partial file and fails. Redirects are followed by hand: the bearer token goes only
// to the scheme, host and port it was given for, never to a redirect's other host or port.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"

namespace kvasir::hub {

struct DownloadOptions {
  std::string expected_sha256;  // lower-case hex; empty: the server's, when it gives one
  std::string bearer_token;     // sent to the first URL's scheme://host:port only (never to a redirect's other host or port)
  int max_attempts = 6;         // connections per download; one that makes progress is not counted
  int retry_delay_ms = 300;
  std::function<void(uint64_t done, uint64_t total)> progress;  // total 0: unknown
};

struct DownloadResult {
  uint64_t bytes = 0;
  std::string sha256;
  bool verified = false;  // a checksum was known and matched
  bool resumed = false;   // some bytes came from an earlier attempt or run
  int connections = 0;
};

Result<DownloadResult> download(const std::string& url, const std::string& dest, const DownloadOptions& options);

// SHA-256 of a file, lower-case hex.
Result<std::string> sha256_file(const std::string& path);

}  // namespace kvasir::hub
