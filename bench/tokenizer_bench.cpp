// Tokenizer throughput: MB/s of English text encoded and decoded per core (thread CPU time).
//
//   tokenizer_bench [--text FILE] [--mb N] [VOCAB.gguf ...]
//
// Without vocabularies it measures ../shared's llama-spm (SentencePiece) and llama-bpe
// (byte-level BPE). Without --text it builds N MB (default 4) of English from a fixed set of
// sentences in a seeded random order. Prints one Markdown row per vocabulary: encoding the whole
// text in one call (long inputs memoize repeated words) and paragraph by paragraph (no memo).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace {

const char* const kSentences[] = {
    "The committee met on Tuesday to discuss the budget for the coming year.",
    "She walked along the river, watching the boats drift slowly toward the harbor.",
    "In 1969, astronauts landed on the Moon and returned safely to Earth.",
    "Most people don't realize how much energy a modern data center consumes.",
    "He said, \"We'll finish the report by Friday, if the numbers are ready.\"",
    "Rain had fallen all night, and the streets were still wet in the morning.",
    "The library's new reading room opens at 9:30 a.m. every weekday.",
    "Researchers found that the treatment reduced symptoms in 62% of patients.",
    "A small dog barked at the mail carrier, then ran back into the garden.",
    "Prices rose sharply after the storm damaged several major roads and bridges.",
    "It's not clear whether the new policy will affect students who've already enrolled.",
    "The old lighthouse, built in the nineteenth century, still guides ships at night.",
    "They're planning a trip to the mountains, where the air is cool and clear.",
    "Engineers tested the bridge with trucks weighing more than forty tons each.",
    "After dinner, the children played games while their parents talked about work.",
    "The museum's collection includes paintings, sculptures, and rare manuscripts.",
    "Nobody expected the quiet little bakery to become the most popular shop in town.",
    "Please send your questions to the organizers before the end of the month.",
    "Winter arrived early that year, covering the fields with a thin layer of snow.",
    "The software update fixed several bugs and improved battery life on older phones.",
};

std::string make_english(size_t bytes) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<size_t> pick(0, std::size(kSentences) - 1);
  std::uniform_int_distribution<int> para(0, 5);
  std::string s;
  s.reserve(bytes + 256);
  while (s.size() < bytes) {
    s += kSentences[pick(rng)];
    s += para(rng) == 0 ? "\n\n" : " ";
  }
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of this thread: throughput per core, undisturbed by other processes being scheduled.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string text_file;
  double mb = 4;
  std::vector<std::string> vocabs;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--text") && i + 1 < argc) {
      text_file = argv[++i];
    } else if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) {
      mb = std::atof(argv[++i]);
    } else {
      vocabs.push_back(argv[i]);
    }
  }
  if (vocabs.empty()) {
    vocabs = {KVASIR_SHARED_DIR "/models/vocab/ggml-vocab-llama-spm.gguf",
              KVASIR_SHARED_DIR "/models/vocab/ggml-vocab-llama-bpe.gguf"};
  }
  std::string text;
  if (!text_file.empty()) {
    std::ifstream in(text_file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "error: cannot read %s\n", text_file.c_str());
      return 1;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else {
    text = make_english(size_t(mb * 1e6));
  }

  // Paragraphs, for the many-short-calls case (each below the size where encode memoizes words).
  std::vector<std::string_view> paragraphs;
  for (size_t p = 0; p < text.size();) {
    size_t e = text.find("\n\n", p);
    e = e == std::string::npos ? text.size() : e + 2;
    paragraphs.push_back(std::string_view(text).substr(p, e - p));
    p = e;
  }

  std::printf("| vocabulary | kind | text MB | tokens | bytes/token | encode MB/s (one call) | encode MB/s (per paragraph) "
              "| decode MB/s | load ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& path : vocabs) {
    const auto t_load = std::chrono::steady_clock::now();
    auto file = kvasir::MappedFile::open(path);
    if (!file) {
      std::fprintf(stderr, "error: %s\n", file.error().c_str());
      return 1;
    }
    auto g = kvasir::gguf::parse(file->bytes());
    if (!g) {
      std::fprintf(stderr, "error: %s: %s\n", path.c_str(), g.error().c_str());
      return 1;
    }
    auto tok = kvasir::Tokenizer::from_gguf(*g);
    if (!tok) {
      std::fprintf(stderr, "error: %s: %s\n", path.c_str(), tok.error().c_str());
      return 1;
    }
    const double load_ms = seconds_since(t_load) * 1e3;

    // Best of three runs, in thread CPU time: the machine may be shared.
    double enc = 1e30, enc_para = 1e30, dec = 1e30;
    std::vector<int32_t> ids;
    std::string back;
    size_t para_tokens = 0;
    for (int run = 0; run < 3; ++run) {
      double t0 = thread_seconds();
      ids = tok->encode(text, {.add_special = false, .parse_special = true});
      enc = std::min(enc, thread_seconds() - t0);
      t0 = thread_seconds();
      para_tokens = 0;
      for (std::string_view p : paragraphs) para_tokens += tok->encode(p, {.add_special = false}).size();
      enc_para = std::min(enc_para, thread_seconds() - t0);
      t0 = thread_seconds();
      back = tok->decode(ids);
      dec = std::min(dec, thread_seconds() - t0);
    }
    if (back != text) std::fprintf(stderr, "warning: %s: decode(encode(text)) != text\n", path.c_str());
    const double mbytes = double(text.size()) / 1e6;
    std::string name = path.substr(path.find_last_of('/') + 1);
    std::printf("| %s | %s | %.2f | %zu | %.2f | %.1f | %.1f | %.1f | %.0f |\n", name.c_str(),
                tok->kind() == kvasir::TokenizerKind::spm ? "SPM" : "BPE", mbytes, ids.size(),
                double(text.size()) / double(ids.size()), mbytes / enc, mbytes / enc_para, mbytes / dec, load_ms);
    (void)para_tokens;
  }
  return 0;
}
