#include "server/ollama_catalog.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace kvasir::server {
namespace {

namespace fs = std::filesystem;

ordered_json to_json(const CatalogEntry& e) {
  return ordered_json{{"name", e.name},         {"from", e.from},     {"path", e.path},
                      {"identity", e.identity}, {"sha256", e.sha256}, {"system", e.system},
                      {"template", e.chat_template}, {"parameters", e.parameters}, {"created_at", e.created_at}};
}

std::optional<CatalogEntry> from_json(const ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  CatalogEntry e;
  auto str = [&](const char* k, std::string& out) {
    if (auto it = j.find(k); it != j.end() && it->is_string()) out = it->get<std::string>();
  };
  str("name", e.name), str("from", e.from), str("path", e.path), str("identity", e.identity);
  str("sha256", e.sha256), str("system", e.system), str("created_at", e.created_at);
  str("template", e.chat_template);
  if (auto it = j.find("parameters"); it != j.end() && it->is_object()) e.parameters = *it;
  if (!valid_model_name(e.name) || (e.from.empty() == e.path.empty())) return std::nullopt;
  return e;
}

}  // namespace

std::string normalize_model_name(const std::string& name) {
  constexpr std::string_view kLatest = ":latest";
  return name.ends_with(kLatest) ? name.substr(0, name.size() - kLatest.size()) : name;
}

bool valid_model_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.' || name[0] == '/') return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != ':' && c != '/') return false;
  return name.find("..") == std::string::npos;
}

Result<std::unique_ptr<OllamaCatalog>> OllamaCatalog::open(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error{"cannot create the model catalog folder '" + dir + "': " + ec.message()};
  auto c = std::unique_ptr<OllamaCatalog>(new OllamaCatalog());
  c->dir_ = dir;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    if (f.path().extension() != ".json") continue;
    std::ifstream in(f.path());
    auto j = ordered_json::parse(in, nullptr, false);
    auto e = from_json(j);
    if (!e) {
      std::fprintf(stderr, "kvasir serve: skipping unreadable model manifest %s\n", f.path().filename().c_str());
      continue;
    }
    c->by_name_[e->name] = std::move(*e);
  }
  return c;
}

// A manifest's file: the name with every character outside [A-Za-z0-9._-] as %XX.
std::string OllamaCatalog::file_of(const std::string& name) const {
  std::string out;
  for (unsigned char c : name) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') out += char(c);
    else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return dir_ + "/" + out + ".json";
}

std::optional<CatalogEntry> OllamaCatalog::find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(normalize_model_name(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<CatalogEntry> OllamaCatalog::list() const {
  std::lock_guard lock(mu_);
  std::vector<CatalogEntry> out;
  for (const auto& [_, e] : by_name_) out.push_back(e);
  return out;
}

Status OllamaCatalog::put(CatalogEntry e) {
  e.name = normalize_model_name(e.name);
  if (!valid_model_name(e.name)) return Error{"invalid model name '" + e.name + "'", ErrorCode::invalid_argument};
  std::lock_guard lock(mu_);
  // Written whole to a temporary file, then renamed: a crash leaves the old manifest or the new.
  const std::string path = file_of(e.name), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << to_json(e).dump(1) << "\n";
    if (!out.flush()) return Error{"cannot write the model manifest for '" + e.name + "'", ErrorCode::unavailable};
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Error{"cannot write the model manifest for '" + e.name + "': " + ec.message(), ErrorCode::unavailable};
  by_name_[e.name] = std::move(e);
  return {};
}

Status OllamaCatalog::remove(const std::string& name) {
  const std::string n = normalize_model_name(name);
  std::lock_guard lock(mu_);
  if (!by_name_.erase(n)) return Error{"model '" + name + "' not found", ErrorCode::not_found};
  std::error_code ec;
  fs::remove(file_of(n), ec);
  return {};
}

}  // namespace kvasir::server
