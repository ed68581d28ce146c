// Where a model reference points and where its file lives in the local cache:
//   hf://ORG/REPO[@REVISION]/PATH/FILE.gguf  a file of a Hugging Face repository (HF_ENDPOINT
//                                           replaces https://huggingface.co, e.g. for a mirror)
//   http(s)://host/.../FILE.gguf            a plain URL
// The cache is KVASIR_CACHE_DIR, else $XDG_CACHE_HOME/kvasir, else ~/.cache/kvasir; files sit
// under models/hf/ORG/REPO/PATH or models/url/HOST/FILE. Every path component is checked, so no
// reference can name a file outside the cache.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvasir::hub {

struct ModelRef {
  std::string url;        // what to download
  std::string cache_rel;  // the file's path under <cache>/models
  std::string display;    // the canonical reference
  bool is_hf = false;     // a Hugging Face file: an HF_TOKEN may be sent to its host
};

bool is_remote_ref(std::string_view ref);  // hf://, http:// or https://
Result<ModelRef> parse_model_ref(std::string_view ref, std::string_view hf_endpoint = "https://huggingface.co");
// The endpoint parse_model_ref should use: $HF_ENDPOINT or https://huggingface.co.
std::string hf_endpoint();
std::string cache_root();

struct CachedModel {
  std::string ref;     // hf://... or the file's path for plain URLs
  std::string path;
  uint64_t bytes = 0;
  bool partial = false;  // a download that has not finished (FILE.part)
};
// Every file under <root>/models, sorted by reference.
std::vector<CachedModel> list_cache(const std::string& root);

// A URL split for an HTTP client.
struct Url {
  std::string scheme;     // http or https
  std::string host_port;  // scheme://host[:port], what httplib's client takes
  std::string host;
  std::string target;     // /path?query
};
Result<Url> parse_url(std::string_view url);

}  // namespace kvasir::hub
