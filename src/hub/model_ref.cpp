#include "hub/model_ref.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace kvasir::hub {

namespace fs = std::filesystem;

namespace {

// A path component a reference may name: no empty, ".", ".." or separators; a conservative set.
bool safe_component(std::string_view s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 255) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '+';
  });
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t at = 0;
  for (;;) {
    const size_t next = s.find(sep, at);
    out.push_back(s.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

bool is_remote_ref(std::string_view ref) {
  return ref.starts_with("hf://") || ref.starts_with("http://") || ref.starts_with("https://");
}

std::string hf_endpoint() {
  std::string e = env_or("HF_ENDPOINT", "https://huggingface.co");
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string cache_root() {
  if (const char* c = std::getenv("KVASIR_CACHE_DIR"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kvasir";
  return env_or("HOME", ".") + "/.cache/kvasir";
}

Result<Url> parse_url(std::string_view url) {
  Url u;
  const size_t colon = url.find("://");
  if (colon == std::string_view::npos) return Error{"not a URL: " + std::string(url), ErrorCode::invalid_argument};
  u.scheme = std::string(url.substr(0, colon));
  if (u.scheme != "http" && u.scheme != "https")
    return Error{"only http and https URLs can be fetched: " + std::string(url), ErrorCode::invalid_argument};
  std::string_view rest = url.substr(colon + 3);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (authority.empty() || authority.find('@') != std::string_view::npos)
    return Error{"bad host in URL: " + std::string(url), ErrorCode::invalid_argument};
  u.host = std::string(authority.substr(0, authority.rfind(':') == std::string_view::npos || authority.front() == '['
                                                ? authority.size()
                                                : authority.rfind(':')));
  u.host_port = u.scheme + "://" + std::string(authority);
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  return u;
}

Result<ModelRef> parse_model_ref(std::string_view ref, std::string_view endpoint) {
  auto bad = [&](const std::string& why) {
    return Error{"bad model reference '" + std::string(ref) + "': " + why, ErrorCode::invalid_argument};
  };
  ModelRef m;
  if (ref.starts_with("hf://")) {
    const auto parts = split(ref.substr(5), '/');
    if (parts.size() < 3) return bad("expected hf://ORG/REPO/FILE");
    std::string_view repo = parts[1], revision = "main";
    if (const size_t at = repo.find('@'); at != std::string_view::npos) {
      revision = repo.substr(at + 1);
      repo = repo.substr(0, at);
    }
    if (!safe_component(parts[0]) || !safe_component(repo) || !safe_component(revision))
      return bad("organization, repository and revision may hold letters, digits, '.', '_', '-' and '+'");
    std::string file;
    for (size_t i = 2; i < parts.size(); ++i) {
      if (!safe_component(parts[i])) return bad("a path component is empty or has characters outside [A-Za-z0-9._+-]");
      file += (i > 2 ? "/" : "") + std::string(parts[i]);
    }
    const std::string org(parts[0]), name(repo);
    m.url = std::string(endpoint) + "/" + org + "/" + name + "/resolve/" + std::string(revision) + "/" + file;
    m.cache_rel = "hf/" + org + "/" + name + (revision == "main" ? "" : "@" + std::string(revision)) + "/" + file;
    m.display = "hf://" + org + "/" + name + (revision == "main" ? "" : "@" + std::string(revision)) + "/" + file;
    m.is_hf = true;
    return m;
  }
  auto u = parse_url(ref);
  if (!u) return bad(u.error());
  std::string_view path = u->target;
  path = path.substr(0, path.find_first_of("?#"));
  const std::string_view file = path.substr(path.rfind('/') + 1);
  std::string host = u->host_port.substr(u->scheme.size() + 3);  // with its port
  std::replace(host.begin(), host.end(), ':', '_');
  if (!safe_component(file)) return bad("the URL's file name is empty or has characters outside [A-Za-z0-9._+-]");
  if (!safe_component(host)) return bad("the URL's host has unexpected characters");
  m.url = std::string(ref);
  m.cache_rel = "url/" + host + "/" + std::string(file);
  m.display = m.url;
  return m;
}

std::vector<CachedModel> list_cache(const std::string& root) {
  std::vector<CachedModel> out;
  const fs::path models = fs::path(root) / "models";
  std::error_code ec;
  if (!fs::is_directory(models, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(models, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    CachedModel c;
    c.path = it->path().string();
    c.bytes = it->file_size(ec);
    std::string rel = fs::relative(it->path(), models, ec).generic_string();
    if (rel.ends_with(".part")) {
      c.partial = true;
      rel.resize(rel.size() - 5);
    }
    c.ref = rel.starts_with("hf/") ? "hf://" + rel.substr(3) : c.path;
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const CachedModel& a, const CachedModel& b) { return a.ref < b.ref; });
  return out;
}

}  // namespace kvasir::hub
