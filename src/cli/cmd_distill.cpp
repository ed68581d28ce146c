// `kvasir distill --teacher T.gguf (--head | --student PRUNED.gguf) -o OUT -f TEXT | --prompts FILE`:
// an EAGLE-style draft head (compress/eagle_head.h) or a pruned copy of the teacher healed through
// an adapter before its output (compress/distill_student.h), distilled on a text and/or on the
// teacher's own continuations of a list of openings (cli/teacher_texts.h, on-policy). The
// teacher's hidden states are computed once, the trained part learns with the distillation loss
// (KL at a temperature, CE on the text, or TVD), AdamW and a warmup + cosine schedule, and is
// checked on held-out text (KL, and how often its top token is the teacher's). A head loads with
// `--spec head --draft-head-file`; a student is a standard GGUF (`--draft-model`, or on its own).
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

#include "cli/common.h"
#include "cli/commands.h"
#include "cli/teacher_texts.h"
#include "compress/distill_head.h"
#include "compress/distill_student.h"
#include "compress/eagle_head.h"
#include "spec/draft_head.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {
namespace {

struct DistillArgs {
  std::string teacher, student, out, text_file, eval_file, resume, prompts_file;
  bool head = false, tvd = false, json = false, gen_greedy = false;
  TeacherTextOptions gen;
  int64_t steps = -1, batch = 64, warmup = 100, n_ctx = 512, max_chunks = -1, eval_every = 250, eval_positions = 4096;
  int64_t checkpoint_every = 500, head_ffn = 1024, unroll = 1;
  int32_t head_tokens = 8192;
  double lr = -1, weight_decay = 0.0, clip = 1.0, temperature = 1.0, ce_weight = 0.0, self_feed = 0.0;
  uint64_t seed = 1;
  int threads = 0;
};

// A head's evaluation also says how often its first two drafts are both kept.
nlohmann::ordered_json eval_json(const compress::HeadEval& e, bool head) {
  nlohmann::ordered_json j{{"kl", e.kl}, {"tvd", e.tvd}, {"accept", e.accept}};
  if (head) j["accept2"] = e.accept2;
  j["positions"] = e.positions;
  return j;
}

nlohmann::ordered_json curve_json(const std::vector<compress::HeadTrainProgress>& curve, bool head) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& p : curve)
    out.push_back({{"step", p.step}, {"train_loss", p.loss}, {"train_kl", p.kl}, {"eval", eval_json(*p.eval, head)}});
  return out;
}

// A model's hidden states over a text's chunks, with a progress line on a terminal.
Result<compress::TeacherFeatures> features_of(const Model& m, std::span<const int32_t> tokens, int64_t n_ctx, int64_t max_chunks,
                                              int32_t bos, int threads, const std::string& what) {
  const bool bar = isatty(STDERR_FILENO);
  auto f = compress::teacher_features(m, tokens,
                                      {.n_ctx = n_ctx, .max_chunks = max_chunks, .bos = bos, .num_threads = threads,
                                       .on_chunk = [&](int64_t c, int64_t n) {
                                         if (bar) std::fprintf(stderr, "\r%s chunk %lld/%lld ", what.c_str(), (long long)c, (long long)n);
                                       }});
  if (bar) std::fprintf(stderr, "\r\033[K");
  return f;
}

// --student: the pruned copy's features on the same chunks, its adapter trained, the file written.
int run_distill_student(const DistillArgs& a, const Model& teacher, const compress::TeacherFeatures& teacher_train,
                        const compress::TeacherFeatures& teacher_held, int32_t bos, double teacher_s,
                        const TeacherTexts& generated) {
  auto loaded = Model::load(a.student);
  if (!loaded) return fail(loaded.error());
  const Model& student = **loaded;
  if (student.config().n_embd != teacher.config().n_embd || student.config().n_vocab != teacher.config().n_vocab)
    return fail(a.student + " is not a pruned copy of the teacher: its width or vocabulary differs");
  const bool bar = isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  auto features = [&](const compress::TeacherFeatures& like, const char* what) {
    return features_of(student, like.tokens, like.n_ctx, like.chunks(), bos, a.threads, what);
  };
  auto train = features(teacher_train, "train: student");
  if (!train) return fail(train.error());
  auto held = features(teacher_held, "held-out: student");
  if (!held) return fail(held.error());
  const double student_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Adam moves every entry of A by about lr a step, and A·n sums d of them: the default scales as 1/d.
  const double lr = a.lr > 0 ? a.lr : 0.1 / double(student.config().n_embd);
  compress::StudentTrainOptions o{.steps = a.steps, .batch = a.batch, .warmup = a.warmup, .lr = lr,
                                  .weight_decay = a.weight_decay, .clip = a.clip,
                                  .loss = {.ce_weight = a.ce_weight, .temperature = a.temperature, .tvd = a.tvd},
                                  .eval_every = a.eval_every, .eval_positions = a.eval_positions, .seed = a.seed,
                                  .num_threads = a.threads};
  o.on_progress = [&](const compress::StudentTrainProgress& p) {
    if (p.eval)
      std::fprintf(stderr, "%sstep %lld/%lld: train loss %.4f KL %.4f | held-out KL %.4f, same top-1 %.1f%%\n", bar ? "\r\033[K" : "",
                   (long long)p.step, (long long)p.steps, p.loss, p.kl, p.eval->kl, 100 * p.eval->accept);
    else if (bar)
      std::fprintf(stderr, "\rdistill: step %lld/%lld, loss %.4f, KL %.4f, lr %.2e, %.0f examples/s  ", (long long)p.step,
                   (long long)p.steps, p.loss, p.kl, p.lr, p.examples_per_s);
  };
  auto r = compress::train_student_adapter(student, teacher_train, *train, teacher_held, *held, o);
  if (bar) std::fprintf(stderr, "\r\033[K");
  if (!r) return fail(r.error());
  const std::vector<std::pair<std::string, std::string>> info = {
      {"teacher", a.teacher}, {"steps", std::to_string(r->steps)}, {"loss", a.tvd ? "tvd" : "kl"},
      {"held_out_kl", std::to_string(r->after.kl)}, {"student", "output adapter folded into output.weight"}};
  if (auto s = compress::write_student(a.student, a.out, student, r->adapter, info, a.threads); !s) return fail(s.error());
  if (a.json) {
    nlohmann::ordered_json j{{"before", eval_json(r->before, false)}, {"after", eval_json(r->after, false)}, {"steps", r->steps},
                             {"examples", r->examples}, {"train_tokens", teacher_train.tokens.size()},
                             {"generated_texts", generated.texts.size()}, {"generated_tokens", generated.generated_tokens},
                             {"teacher_seconds", teacher_s}, {"student_seconds", student_s}, {"train_seconds", r->seconds}};
    j["curve"] = curve_json(r->curve, false);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: %s with an output adapter; %lld steps x %lld examples, %.0f s (features: teacher %.0f s, student %.0f s)\n",
                a.out.c_str(), a.student.c_str(), (long long)r->steps, (long long)a.batch, r->seconds, teacher_s, student_s);
    std::printf("held-out against the teacher: KL %.4f -> %.4f, TVD %.4f -> %.4f, same top-1 (a greedy draft's first token kept) %.1f%% -> %.1f%%\n",
                r->before.kl, r->after.kl, r->before.tvd, r->after.tvd, 100 * r->before.accept, 100 * r->after.accept);
  }
  return 0;
}

int run_distill(DistillArgs a) {
  if (a.head == !a.student.empty())
    return fail("say what to distil: --head (an EAGLE-style draft head over the teacher's hidden states) or --student "
                "PRUNED.gguf (a pruned copy of the teacher, healed through an adapter before its output)");
  if (!a.head && (a.unroll != 1 || a.self_feed > 0))
    return fail("--unroll and --self-feed shape a draft head's training: they go with --head, not --student");
  if (a.out.empty()) return fail(a.head ? "give the output file: -o head.gguf" : "give the output file: -o student.gguf");
  if (a.out == a.student) return fail("the output must be another file than the student");
  if (a.steps < 0) a.steps = a.head ? 3000 : 300;
  if (a.text_file.empty() && a.prompts_file.empty())
    return fail("give the training data: -f TEXT and/or --prompts FILE (openings the teacher continues)");
  if (a.out == a.teacher) return fail("the output must be another file than the teacher");
  auto model = Model::load(model_path(a.teacher));
  if (!model) return fail(model.error());
  const Model& target = **model;
  auto tok = Tokenizer::from_gguf(target.gguf());
  if (!tok) return fail(a.teacher + ": " + tok.error());
  const bool bar = isatty(STDERR_FILENO);
  std::string text;
  if (!a.text_file.empty()) {
    auto t = text_or_builtin(a.text_file, "-f");
    if (!t) return fail(t.error());
    text = std::move(*t);
  }
  // On-policy data: the teacher's own continuations, after the text (so the held-out tail is theirs).
  TeacherTexts generated;
  if (!a.prompts_file.empty()) {
    auto prompts = read_prompts(a.prompts_file);
    if (!prompts) return fail("--prompts: " + prompts.error());
    a.gen.threads = a.threads;
    a.gen.seed = a.seed;
    a.gen.greedy = a.gen_greedy;
    a.gen.progress = [&](int64_t done, int64_t total, int64_t n) {
      if (bar) std::fprintf(stderr, "\rteacher texts: %lld/%lld, %lld tokens ", (long long)done, (long long)total, (long long)n);
    };
    auto g = teacher_texts(target, *tok, *prompts, a.gen);
    if (bar) std::fprintf(stderr, "\r\033[K");
    if (!g) return fail("--prompts: " + g.error());
    generated = std::move(*g);
    for (const std::string& t : generated.texts) text += (text.empty() ? "" : "\n\n") + t;
    std::fprintf(stderr, "teacher texts: %zu from %zu prompts, %lld tokens generated in %.0f s\n", generated.texts.size(),
                 prompts->size(), (long long)generated.generated_tokens, generated.seconds);
  }
  std::vector<int32_t> tokens = tok->encode(text), eval_tokens;
  if (!a.eval_file.empty()) {
    auto e = text_or_builtin(a.eval_file, "--eval-text");
    if (!e) return fail(e.error());
    eval_tokens = tok->encode(*e);
  } else {  // the text's last tenth
    const size_t split = tokens.size() - std::max<size_t>(size_t(a.n_ctx), tokens.size() / 10);
    if (tokens.size() < size_t(2 * a.n_ctx)) return fail("the text is too short to hold out a chunk: give --eval-text FILE");
    eval_tokens.assign(tokens.begin() + ptrdiff_t(split), tokens.end());
    tokens.resize(split);
  }
  const int32_t bos = tok->add_bos() ? tok->bos() : -1;
  const auto t0 = std::chrono::steady_clock::now();
  auto train = features_of(target, tokens, a.n_ctx, a.max_chunks, bos, a.threads, "train: teacher");
  if (!train) return fail(train.error());
  auto held = features_of(target, eval_tokens, a.n_ctx,
                          std::max<int64_t>(1, a.eval_positions / std::max<int64_t>(1, a.n_ctx - 2) + 1), bos, a.threads,
                          "held-out: teacher");
  if (!held) return fail(held.error());
  const double teacher_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.head) return run_distill_student(a, target, *train, *held, bos, teacher_s, generated);

  int64_t first_step = 0;
  std::optional<compress::EagleHead> head;
  if (!a.resume.empty()) {
    auto h = compress::EagleHead::load(a.resume, target);
    if (!h) return fail(h.error());
    head = std::move(*h);
    if (auto file = MappedFile::open(a.resume); file)
      if (auto g = gguf::parse(file->bytes()); g)
        if (auto s = g->get_string("eagle.train.step"); s) first_step = std::strtoll(s->c_str(), nullptr, 10);
    if (first_step >= a.steps) return fail(a.resume + " has trained " + std::to_string(first_step) + " of --steps " + std::to_string(a.steps) + " already");
  } else {
    const int64_t n_vocab = std::min<int64_t>(tok->n_vocab(), target.config().n_vocab);
    auto ids = spec::frequent_tokens(train->tokens, std::min<int32_t>(a.head_tokens, int32_t(n_vocab)), tok->eog_ids(), n_vocab);
    auto h = compress::EagleHead::init(target, a.head_ffn, std::move(ids), a.seed);
    if (!h) return fail(h.error());
    head = std::move(*h);
  }
  auto info = [&](int64_t step) {
    return std::vector<std::pair<std::string, std::string>>{
        {"step", std::to_string(step)}, {"steps", std::to_string(a.steps)}, {"text", a.text_file}, {"prompts", a.prompts_file},
        {"loss", a.tvd ? "tvd" : "kl"}, {"temperature", std::to_string(a.temperature)}, {"ce_weight", std::to_string(a.ce_weight)}};
  };
  compress::HeadTrainOptions o{
      .steps = a.steps, .batch = a.batch, .warmup = a.warmup, .first_step = first_step, .lr = a.lr > 0 ? a.lr : 1e-3,
      .weight_decay = a.weight_decay, .clip = a.clip,
      .loss = {.ce_weight = a.ce_weight, .temperature = a.temperature, .tvd = a.tvd},
      .self_feed = a.self_feed, .unroll = a.unroll, .eval_every = a.eval_every, .eval_positions = a.eval_positions, .seed = a.seed,
      .num_threads = a.threads};
  o.on_progress = [&](const compress::HeadTrainProgress& p) {
    const double left = double(p.steps - p.step) * double(a.batch) / std::max(p.examples_per_s, 1e-9);
    if (p.eval) {
      std::fprintf(stderr, "%sstep %lld/%lld: train loss %.4f KL %.4f | held-out KL %.4f, top-1 agreement %.1f%%, both of two %.1f%%\n",
                   bar ? "\r\033[K" : "", (long long)p.step, (long long)p.steps, p.loss, p.kl, p.eval->kl, 100 * p.eval->accept,
                   100 * p.eval->accept2);
    } else if (bar) {
      std::fprintf(stderr, "\rdistill: step %lld/%lld, loss %.4f, KL %.4f, lr %.2e, %.0f examples/s, %.0f s left  ",
                   (long long)p.step, (long long)p.steps, p.loss, p.kl, p.lr, p.examples_per_s, left);
    }
  };
  o.checkpoint_every = a.checkpoint_every;
  o.on_checkpoint = [&](int64_t step) { return head->save(a.out, info(step)); };
  auto r = compress::train_head(*head, *train, *held, o);
  if (bar) std::fprintf(stderr, "\r\033[K");
  if (!r) return fail(r.error());
  if (auto s = head->save(a.out, info(a.steps)); !s) return fail(s.error());
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.json) {
    nlohmann::ordered_json j{{"before", eval_json(r->before, true)}, {"after", eval_json(r->after, true)}, {"steps", r->steps},
                             {"examples", r->examples}, {"train_tokens", train->tokens.size()},
                             {"head_tokens", head->n_tokens()}, {"generated_texts", generated.texts.size()},
                             {"generated_tokens", generated.generated_tokens}, {"generate_seconds", generated.seconds},
                             {"teacher_seconds", teacher_s},
                             {"train_seconds", r->seconds}, {"seconds", total_s}};
    j["curve"] = curve_json(r->curve, true);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: head of %lld tokens, FFN %lld; %lld steps x %lld examples (%zu training tokens), %.0f s (teacher %.0f s)\n",
                a.out.c_str(), (long long)head->n_tokens(), (long long)a.head_ffn, (long long)r->steps, (long long)a.batch,
                train->tokens.size(), total_s, teacher_s);
    std::printf("held-out: KL %.4f -> %.4f, TVD %.4f -> %.4f, top-1 agreement with the target %.1f%% -> %.1f%%, "
                "both of two drafts %.1f%% -> %.1f%%\n",
                r->before.kl, r->after.kl, r->before.tvd, r->after.tvd, 100 * r->before.accept, 100 * r->after.accept,
                100 * r->before.accept2, 100 * r->after.accept2);
  }
  return 0;
}

}  // namespace

void register_distill(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<DistillArgs>();
  auto* cmd = app.add_subcommand("distill", "Distil from a model: an EAGLE-style draft head (--head) or a pruned copy healed toward it (--student)");
  cmd->add_option("--teacher", a->teacher, "The target model (default: the installed Gemma 3 270M)");
  cmd->add_flag("--head", a->head, "Distil an EAGLE-style draft head (one FFN block over [hidden; next embedding])");
  cmd->add_option("--student", a->student,
                  "A pruned copy of the teacher (kvasir prune): trained through an adapter before its output, written to -o");
  cmd->add_option("-o,--output", a->out, "Output file (also the checkpoint)");
  cmd->add_option("-f,--text", a->text_file, "Training text (and/or --prompts)");
  cmd->add_option("--prompts", a->prompts_file,
                  "Openings, one per line: the teacher continues each (on-policy data), after any -f text");
  cmd->add_option("--samples", a->gen.samples, "Continuations per opening (default 4)")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--gen-tokens", a->gen.max_tokens, "Tokens per continuation (default 256)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gen-temperature", a->gen.temperature, "Sampling temperature of the continuations (default 0.8, top-p 0.95)")
      ->check(CLI::Range(0.0, 5.0));
  cmd->add_flag("--gen-greedy", a->gen_greedy,
                "Also continue each sample's first 24 words greedily (the texts greedy decoding meets)");
  cmd->add_option("--eval-text", a->eval_file, "Held-out text (default: the training text's last tenth)");
  cmd->add_option("--steps", a->steps, "Optimizer steps (default: 3000 for a head, 300 for a student)")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--batch", a->batch, "Examples per step (default 64)")->check(CLI::Range(int64_t(1), int64_t(1) << 14));
  cmd->add_option("--lr", a->lr, "Peak learning rate (default: 1e-3 for a head, 0.1 / width for a student)")->check(CLI::Range(1e-7, 1.0));
  cmd->add_option("--warmup", a->warmup, "Warmup steps (default 100)")->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--weight-decay", a->weight_decay, "AdamW's decoupled weight decay (default 0)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--clip", a->clip, "Gradient norm bound (default 1)")->check(CLI::Range(1e-6, 1e6));
  cmd->add_option("--temperature", a->temperature, "Distillation temperature T (default 1)")->check(CLI::Range(0.05, 100.0));
  cmd->add_option("--ce-weight", a->ce_weight, "λ: weight of the CE on the text's token (default 0)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--self-feed", a->self_feed,
                  "Fraction of examples whose input is the head's own predicted state (drafting feeds it back)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--unroll", a->unroll,
                  "Draft positions trained per example, each fed the one before's predicted state, the gradient through it "
                  "(default 1)")
      ->check(CLI::Range(int64_t(1), int64_t(8)));
  cmd->add_flag("--tvd", a->tvd, "Train on total variation distance instead of KL (acceptance = 1 - TVD)");
  cmd->add_option("--head-tokens", a->head_tokens, "The head's vocabulary: the N most frequent tokens of the text (default 8192)")
      ->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--head-ffn", a->head_ffn, "The head's FFN width (default 1024)")->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  cmd->add_option("-c,--ctx", a->n_ctx, "Chunk size of the teacher's pass (default 512)")->check(CLI::Range(int64_t(16), int64_t(1) << 16));
  cmd->add_option("--max-chunks", a->max_chunks, "Training chunks at most (default: the whole text)");
  cmd->add_option("--eval-every", a->eval_every, "Steps between held-out evaluations (default 250)");
  cmd->add_option("--eval-positions", a->eval_positions, "Held-out positions evaluated (default 4096)");
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "Steps between checkpoints written to -o (default 500)");
  cmd->add_option("--resume", a->resume, "Continue from a checkpoint (its weights and step; fresh optimizer moments)");
  cmd->add_option("--seed", a->seed, "Seed of the head's initialization and the example order");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([&handler, a] { handler = [a] { return run_distill(*a); }; });
}

}  // namespace kvasir::cli
