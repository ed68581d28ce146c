// Model references and downloads against a local HTTP server the test runs (no hub is reachable
// here): Hugging Face's redirect and X-Linked-Etag, resume after a cut connection and from an
// earlier run, a server that ignores Range, checksum mismatch, 404, and `kvasir pull` / `list` /
// `-m hf://...` driving the binary as a user would.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "hub/download.h"
#include "hub/model_ref.h"

using namespace kvasir;
namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A file server: /blob (ranges, optional cut), HF's resolve URL redirecting to /blob, /missing
// (404). Records every Range header it saw.
class FileServer {
 public:
  explicit FileServer(std::string blob, std::string announced_sha = "") : blob_(std::move(blob)), sha_(std::move(announced_sha)) {
    auto serve_blob = [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ranges_.push_back(req.get_header_value("Range"));
        auths_.push_back(req.get_header_value("Authorization"));
      }
      if (!sha_.empty()) res.set_header("ETag", "\"" + sha_ + "\"");
      res.set_content_provider(blob_.size(), "application/octet-stream",
                               [this](size_t offset, size_t length, httplib::DataSink& sink) {
                                 const size_t cut = cut_at_.load();
                                 if (cut > 0 && offset >= cut) {
                                   cut_at_ = 0;  // once
                                   return false;  // the connection drops mid-body
                                 }
                                 size_t n = std::min<size_t>(length, 16384);
                                 if (cut > 0) n = std::min(n, cut - offset);
                                 sink.write(blob_.data() + offset, n);
                                 return true;
                               });
    };
    svr_.Get("/blob", serve_blob);
    svr_.Get("/org/repo/resolve/main/model.gguf", [this](const httplib::Request&, httplib::Response& res) {
      res.status = 302;
      res.set_header("Location", "/blob");
      if (!sha_.empty()) res.set_header("X-Linked-Etag", "\"" + sha_ + "\"");
      res.set_header("X-Linked-Size", std::to_string(blob_.size()));
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FileServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void cut_after(size_t bytes) { cut_at_ = bytes; }
  std::vector<std::string> ranges() {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_;
  }
  std::vector<std::string> auths() {  // the Authorization header of each /blob request ("" when none)
    std::lock_guard<std::mutex> lock(mu_);
    return auths_;
  }

 private:
  std::string blob_, sha_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<size_t> cut_at_{0};
  std::mutex mu_;
  std::vector<std::string> ranges_, auths_;
};

// Answers /model.gguf by pointing at `to` (another server: another port of the same host), on
// HEAD and GET alike or, with `get_only`, only on GET (HEAD says 200, as a server whose GET
// redirects to a signed URL may). Records the Authorization header of each request.
class RedirectServer {
 public:
  RedirectServer(std::string to, bool get_only, uint64_t announced_size) : to_(std::move(to)) {
    svr_.Get("/model.gguf", [this, get_only, announced_size](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auths_.push_back(req.get_header_value("Authorization"));
      }
      res.set_header("X-Linked-Size", std::to_string(announced_size));
      if (req.method == "HEAD" && get_only) return;  // 200
      res.status = 302;
      res.set_header("Location", to_);
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~RedirectServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/model.gguf"; }
  std::vector<std::string> auths() {
    std::lock_guard<std::mutex> lock(mu_);
    return auths_;
  }

 private:
  std::string to_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> auths_;
};

// A server that ignores Range: every request gets 200 and the whole file (raw sockets, since
// httplib's server always honours ranges).
class NoRangeServer {
 public:
  explicit NoRangeServer(std::string blob) : blob_(std::move(blob)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), len);
    ::listen(fd_, 8);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        std::string req;
        char buf[4096];
        while (req.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          req.append(buf, size_t(n));
        }
        const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(blob_.size()) +
                                 "\r\nConnection: close\r\n\r\n";
        ::send(c, head.data(), head.size(), MSG_NOSIGNAL);
        if (req.starts_with("GET")) ::send(c, blob_.data(), blob_.size(), MSG_NOSIGNAL);
        ::close(c);
      }
    });
  }
  ~NoRangeServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  std::string blob_;
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

std::string random_blob(size_t n) {
  std::mt19937 rng(42);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng());
  return s;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("kvasir-hub-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::string sha_of(const std::string& data, const TempDir& t) {
  const std::string p = (t.path / "sha-input").string();
  std::ofstream(p, std::ios::binary) << data;
  auto s = hub::sha256_file(p);
  EXPECT_TRUE(s.ok());
  fs::remove(p);
  return *s;
}

hub::DownloadOptions quick() {
  hub::DownloadOptions o;
  o.retry_delay_ms = 10;
  return o;
}

}  // namespace

TEST(ModelRef, HuggingFaceAndUrlsMapIntoTheCacheOnly) {
  auto m = hub::parse_model_ref("hf://unsloth/gemma-3-270m-it-GGUF/gemma-3-270m-it-Q4_K_M.gguf", "https://hf.example");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m->url, "https://hf.example/unsloth/gemma-3-270m-it-GGUF/resolve/main/gemma-3-270m-it-Q4_K_M.gguf");
  EXPECT_EQ(m->cache_rel, "hf/unsloth/gemma-3-270m-it-GGUF/gemma-3-270m-it-Q4_K_M.gguf");
  EXPECT_TRUE(m->is_hf);
  auto rev = hub::parse_model_ref("hf://a/b@v1.0/sub/f.gguf", "https://h");
  ASSERT_TRUE(rev.ok());
  EXPECT_EQ(rev->url, "https://h/a/b/resolve/v1.0/sub/f.gguf");
  EXPECT_EQ(rev->cache_rel, "hf/a/b@v1.0/sub/f.gguf");
  auto url = hub::parse_model_ref("https://example.com:8443/x/y/model.gguf?download=1");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->cache_rel, "url/example.com_8443/model.gguf");
  EXPECT_FALSE(url->is_hf);
  for (const char* bad : {"hf://a/b", "hf://a/../f.gguf", "hf://../b/f.gguf", "hf://a/b/../../etc/passwd", "hf://a/b//f",
                          "hf://a b/c/f.gguf", "https://example.com/", "https://example.com/..", "ftp://x/y.gguf",
                          "https://user@host/f.gguf"})
    EXPECT_FALSE(hub::parse_model_ref(bad, "https://h").ok()) << bad;
}

TEST(Download, FollowsHuggingFacesRedirectAndVerifiesItsChecksum) {
  TempDir t;
  const std::string blob = random_blob(300000);
  FileServer srv(blob, sha_of(blob, t));
  const std::string dest = (t.path / "m" / "model.gguf").string();
  auto r = hub::download(srv.url("/org/repo/resolve/main/model.gguf"), dest, quick());
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r->verified);
  EXPECT_EQ(r->bytes, blob.size());
  EXPECT_EQ(read_all(dest), blob);
  EXPECT_FALSE(fs::exists(dest + ".part"));
}

TEST(Download, ResumesAfterACutConnectionAndFromAnEarlierRun) {
  TempDir t;
  const std::string blob = random_blob(500000);
  {
    FileServer srv(blob, sha_of(blob, t));
    srv.cut_after(200000);
    const std::string dest = (t.path / "a.gguf").string();
    auto r = hub::download(srv.url("/blob"), dest, quick());
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_GE(r->connections, 2);
    EXPECT_TRUE(r->verified);
    EXPECT_EQ(read_all(dest), blob);
    const auto ranges = srv.ranges();
    ASSERT_FALSE(ranges.empty());
    EXPECT_EQ(ranges.back(), "bytes=200000-");  // went on where the file ended
  }
  FileServer srv(blob, sha_of(blob, t));
  const std::string dest = (t.path / "b.gguf").string();
  std::ofstream(dest + ".part", std::ios::binary) << blob.substr(0, 123456);  // an earlier run's partial file
  auto r = hub::download(srv.url("/blob"), dest, quick());
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r->resumed);
  EXPECT_EQ(srv.ranges().back(), "bytes=123456-");
  EXPECT_EQ(read_all(dest), blob);
}

TEST(Download, AServerThatIgnoresRangeStartsOver) {
  TempDir t;
  const std::string blob = random_blob(100000);
  NoRangeServer srv(blob);
  const std::string dest = (t.path / "c.gguf").string();
  std::ofstream(dest + ".part", std::ios::binary) << std::string(5000, 'x');  // not the file's bytes
  hub::DownloadOptions o = quick();
  o.expected_sha256 = sha_of(blob, t);
  auto r = hub::download(srv.url("/file.gguf"), dest, o);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_FALSE(r->resumed);
  EXPECT_TRUE(r->verified);
  EXPECT_EQ(read_all(dest), blob);
}

TEST(Download, ChecksumMismatchIsRefusedAndRemoved) {
  TempDir t;
  const std::string blob = random_blob(50000);
  FileServer srv(blob, std::string(64, 'a'));  // the server announces another file's checksum
  const std::string dest = (t.path / "d.gguf").string();
  auto r = hub::download(srv.url("/org/repo/resolve/main/model.gguf"), dest, quick());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("checksum mismatch"), std::string::npos) << r.error();
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(fs::exists(dest + ".part"));
  // The caller's checksum wins over the server's.
  hub::DownloadOptions o = quick();
  o.expected_sha256 = sha_of(blob, t);
  EXPECT_TRUE(hub::download(srv.url("/org/repo/resolve/main/model.gguf"), dest, o).ok());
}

// Hardening II: HF_TOKEN went along to a redirect's other host or port (the client followed the
// redirect itself, headers and all).
TEST(Download, TheTokenGoesOnlyToTheHostAndPortItWasGivenFor) {
  TempDir t;
  const std::string blob = random_blob(40000);
  FileServer files(blob);  // another port of the same host
  for (bool get_only : {false, true}) {
    RedirectServer hub(files.url("/blob"), get_only, blob.size());
    hub::DownloadOptions o = quick();
    o.bearer_token = "secret-token";
    const std::string dest = (t.path / (get_only ? "g2.gguf" : "g1.gguf")).string();
    auto r = hub::download(hub.url(), dest, o);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(read_all(dest), blob);
    const auto seen = hub.auths();
    ASSERT_FALSE(seen.empty());
    for (const std::string& a : seen) EXPECT_EQ(a, "Bearer secret-token");  // where it was given
  }
  const auto at_files = files.auths();
  ASSERT_GE(at_files.size(), 2u);  // HEADs and GETs
  for (const std::string& a : at_files) EXPECT_EQ(a, "") << "the token reached another port";
  // Straight to the file server, the token goes along.
  hub::DownloadOptions o = quick();
  o.bearer_token = "secret-token";
  ASSERT_TRUE(hub::download(files.url("/blob"), (t.path / "g3.gguf").string(), o).ok());
  EXPECT_EQ(files.auths().back(), "Bearer secret-token");
}

TEST(Download, MoreBytesThanAnnouncedIsRefusedAndThePartialFileRemoved) {
  TempDir t;
  const std::string blob = random_blob(200000);
  FileServer files(blob);
  RedirectServer hub(files.url("/blob"), false, 1000);  // announces 1,000 bytes
  const std::string dest = (t.path / "o.gguf").string();
  auto r = hub::download(hub.url(), dest, quick());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("1000 were announced"), std::string::npos) << r.error();
  EXPECT_FALSE(fs::exists(dest + ".part"));
  EXPECT_FALSE(fs::exists(dest));
}

TEST(Download, MissingFilesAndDeadServersFailClearly) {
  TempDir t;
  FileServer srv("x");
  auto r = hub::download(srv.url("/missing"), (t.path / "e.gguf").string(), quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_code(), ErrorCode::not_found);
  auto dead = hub::download("http://127.0.0.1:1/f.gguf", (t.path / "f.gguf").string(), quick());
  ASSERT_FALSE(dead.ok());
  EXPECT_NE(dead.error().find("cannot reach"), std::string::npos) << dead.error();
}

// `kvasir pull` into KVASIR_CACHE_DIR from HF_ENDPOINT, `kvasir list`, then `-m hf://...`.
TEST(Pull, TheCommandDownloadsListsAndResolvesAReference) {
  const std::string model = std::string(KVASIR_SHARED_DIR) + "/models/stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "../shared is not available";
  TempDir t;
  const std::string blob = read_all(model);
  FileServer srv(blob, sha_of(blob, t));
  srv.cut_after(blob.size() / 2);
  const std::string env = "KVASIR_CACHE_DIR=" + (t.path / "cache").string() + " HF_ENDPOINT=" + srv.endpoint() + " ";
  const std::string bin = std::string(KVASIR_BIN_DIR) + "/kvasir";
  const std::string out = (t.path / "out.txt").string();
  ASSERT_EQ(std::system((env + bin + " pull hf://org/repo/model.gguf > " + out + " 2>&1").c_str()), 0) << read_all(out);
  const std::string cached = (t.path / "cache" / "models" / "hf" / "org" / "repo" / "model.gguf").string();
  EXPECT_NE(read_all(out).find("verified"), std::string::npos) << read_all(out);
  EXPECT_EQ(read_all(cached), blob);
  ASSERT_EQ(std::system((env + bin + " list > " + out + " 2>&1").c_str()), 0);
  EXPECT_NE(read_all(out).find("hf://org/repo/model.gguf"), std::string::npos) << read_all(out);
  ASSERT_EQ(std::system((env + bin + " inspect hf://org/repo/model.gguf > " + out + " 2>&1").c_str()), 0) << read_all(out);
  EXPECT_NE(read_all(out).find("llama"), std::string::npos);
  // A wrong --sha256 is refused for a cached file too, and a second pull is a no-op.
  EXPECT_NE(std::system((env + bin + " pull hf://org/repo/model.gguf --sha256 " + std::string(64, '0') + " > " + out + " 2>&1").c_str()), 0);
  EXPECT_EQ(std::system((env + bin + " pull hf://org/repo/model.gguf > " + out + " 2>&1").c_str()), 0);
  EXPECT_NE(read_all(out).find("already in the cache"), std::string::npos);
  // Downloading again against a wrong checksum fails and leaves nothing behind.
  EXPECT_NE(std::system((env + bin + " pull hf://org/repo/model.gguf --force --sha256 " + std::string(64, 'b') + " > " + out + " 2>&1").c_str()), 0);
  EXPECT_NE(read_all(out).find("checksum mismatch"), std::string::npos) << read_all(out);
  EXPECT_FALSE(fs::exists(cached));
  EXPECT_FALSE(fs::exists(cached + ".part"));
  // A bad reference is refused before any connection.
  EXPECT_NE(std::system((env + bin + " pull hf://org/../etc/passwd > " + out + " 2>&1").c_str()), 0);
  EXPECT_NE(read_all(out).find("bad model reference"), std::string::npos) << read_all(out);
}
