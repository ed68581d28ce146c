// `kvasir pull REF [--sha256 HEX] [--force]`: downloads a GGUF (hf://ORG/REPO/FILE or a URL) into
// the cache, resuming an earlier partial download, with a progress bar on a terminal and the
// checksum verified; prints the file's path on stdout. `kvasir list`: what the cache holds.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/common.h"
#include "cli/commands.h"
#include "hub/download.h"
#include "hub/model_ref.h"

namespace kvasir::cli {
namespace {

namespace fs = std::filesystem;

struct PullArgs {
  std::string ref, sha256;
  bool force = false;
};

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1 << 20));
  return buf;
}

int run_pull(const PullArgs& a) {
  auto ref = hub::parse_model_ref(a.ref, hub::hf_endpoint());
  if (!ref) return fail(ref.error());
  const std::string dest = hub::cache_root() + "/models/" + ref->cache_rel;
  std::error_code ec;
  if (fs::exists(dest, ec) && !a.force) {
    if (!a.sha256.empty()) {
      auto sum = hub::sha256_file(dest);
      if (!sum) return fail(sum.error());
      if (*sum != a.sha256) return fail(dest + ": cached file has sha256 " + *sum + ", not " + a.sha256 + " (use --force)");
    }
    std::fprintf(stderr, "pull: %s is already in the cache\n", ref->display.c_str());
    std::printf("%s\n", dest.c_str());
    return 0;
  }
  if (a.force) fs::remove(dest, ec);
  hub::DownloadOptions o;
  for (char c : a.sha256) o.expected_sha256 += char(std::tolower(static_cast<unsigned char>(c)));
  if (ref->is_hf)
    if (const char* t = std::getenv("HF_TOKEN"); t && *t) o.bearer_token = t;
  const bool bar = isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0 - std::chrono::seconds(1);
  o.progress = [&](uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (!bar || (now - last < std::chrono::milliseconds(100) && done != total)) return;
    last = now;
    const double s = std::max(1e-3, std::chrono::duration<double>(now - t0).count());
    if (total > 0) {
      const int width = 30, filled = int(width * double(done) / double(total));
      std::fprintf(stderr, "\r[%.*s%*s] %5.1f%% %s / %s  %.1f MiB/s ", filled, "==============================",
                   width - filled, "", 100.0 * double(done) / double(total), mib(done).c_str(), mib(total).c_str(),
                   double(done) / s / (1 << 20));
    } else {
      std::fprintf(stderr, "\r%s  %.1f MiB/s ", mib(done).c_str(), double(done) / s / (1 << 20));
    }
  };
  std::fprintf(stderr, "pull: %s\n", ref->url.c_str());
  auto r = hub::download(ref->url, dest, o);
  if (bar) std::fprintf(stderr, "\r\033[K");
  if (!r) return fail(r.error());
  std::fprintf(stderr, "pull: %s, %s%s, sha256 %s (%s)\n", ref->display.c_str(), mib(r->bytes).c_str(),
               r->resumed ? ", resumed" : "", r->sha256.c_str(),
               r->verified ? "verified" : "not verified: the server announced no checksum; pass --sha256");
  std::printf("%s\n", dest.c_str());
  return 0;
}

int run_list() {
  const auto models = hub::list_cache(hub::cache_root());
  if (models.empty()) {
    std::fprintf(stderr, "list: the cache (%s) holds no models; `kvasir pull REF` fetches one\n", hub::cache_root().c_str());
    return 0;
  }
  for (const auto& m : models)
    std::printf("%-60s %12s%s  %s\n", m.ref.c_str(), mib(m.bytes).c_str(), m.partial ? " (partial)" : "", m.path.c_str());
  return 0;
}

}  // namespace

void register_pull(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<PullArgs>();
  auto* cmd = app.add_subcommand("pull", "Download a GGUF into the cache (hf://ORG/REPO/FILE.gguf or an http(s) URL)");
  cmd->add_option("ref", a->ref, "hf://ORG/REPO[@REVISION]/FILE.gguf or a URL")->required();
  cmd->add_option("--sha256", a->sha256, "Expected SHA-256 (default: the one the server announces, if any)")
      ->check([](const std::string& s) {
        return s.size() == 64 && s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos
                   ? std::string()
                   : std::string("a SHA-256 is 64 hex digits");
      });
  cmd->add_flag("--force", a->force, "Download again even when the file is cached");
  cmd->callback([&handler, a] { handler = [a] { return run_pull(*a); }; });
  auto* list = app.add_subcommand("list", "The models in the cache (KVASIR_CACHE_DIR, else ~/.cache/kvasir)");
  list->callback([&handler] { handler = [] { return run_list(); }; });
}

}  // namespace kvasir::cli
