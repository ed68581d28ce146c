// Ollama's local models, as /api/create, /api/copy, /api/delete and /api/pull manage them. A
// server serves one base model (its LoRA adapters aside); a catalog entry is a name over one of
// them with a system prompt and default parameters (Ollama's Modelfile SYSTEM and PARAMETER),
// or a GGUF that /api/pull fetched or /api/create named by path. Requests name entries like any
// model: an entry whose weights are the served model's (the same content identity) answers; one
// of other weights is listed and shown but answers 404 saying which model to serve. Entries are
// JSON manifests in one folder, so they survive restarts. Thread-safe.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/protocol.h"

namespace kvasir::server {

struct CatalogEntry {
  std::string name;          // normalized: no ":latest"
  std::string from;          // the model it derives from (a served name, an adapter, an entry); empty for a file
  std::string path;          // a GGUF file (pulled or named at create); empty when `from` is set
  std::string identity;      // the file's content identity (Model::identity), when `path` is set
  std::string sha256;        // a pulled file's digest
  std::string system;        // default system prompt; empty: none
  std::string chat_template; // a Jinja chat template in place of the model's; empty: the model's
  ordered_json parameters = ordered_json::object();  // default Ollama options
  std::string created_at;
};

class OllamaCatalog {
 public:
  // Reads every manifest in `dir` (created if missing); unreadable ones are skipped with a log line.
  static Result<std::unique_ptr<OllamaCatalog>> open(const std::string& dir);
  std::optional<CatalogEntry> find(const std::string& name) const;
  std::vector<CatalogEntry> list() const;
  Status put(CatalogEntry entry);                 // creates or replaces
  Status remove(const std::string& name);         // ErrorCode::not_found when none
  const std::string& dir() const { return dir_; }

 private:
  std::string file_of(const std::string& name) const;
  std::string dir_;
  mutable std::mutex mu_;
  std::map<std::string, CatalogEntry> by_name_;
};

// "name:latest" -> "name"; other tags are part of the name.
std::string normalize_model_name(const std::string& name);
// 1 to 128 characters of letters, digits and . _ - : /, not starting with . or /.
bool valid_model_name(const std::string& name);

}  // namespace kvasir::server
