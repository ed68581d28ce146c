// Distilling a pruned copy back toward its target (the student of `kvasir distill --student`):
// both share the output matrix W (pruning keeps it), and the student learns a linear adapter A
// between its normed final hidden state n and the head, z_student = softcap(W · (n + A·n)),
// against the target's z_teacher = softcap(W · n_teacher) on the same text, with the loss of
// grad.h (KL at a temperature, CE, or TVD), AdamW, clipping and a warmup + cosine schedule. A
// starts at zero (the student as pruned) and is d x d: the part of the pruned layers' work that is
// a linear map of the residual stream's last state. Both models' hidden states are computed once
// (d floats a position each); the logits over the whole vocabulary are recomputed per batch.
// The result folds into the file: W' = W · (I + A) written as the student's `output.weight` (in
// the output's own type; a tied embedding stays the input embedding), so it is a standard GGUF
// that any loader runs at the pruned model's speed.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compress/distill_head.h"
#include "compress/grad.h"
#include "core/status.h"
#include "model/model.h"

namespace kvasir::compress {

// The same figures as a head's: KL, TVD, and accept = the student's top token is the teacher's
// (a greedy draft's first token kept).
using StudentEval = HeadEval;
using StudentTrainProgress = HeadTrainProgress;

struct StudentTrainOptions {
  int64_t steps = 300, batch = 32, warmup = 20;
  double lr = 1e-3, weight_decay = 0.0, clip = 1.0;
  grad::LossOptions loss = {};
  int64_t eval_every = 100, eval_positions = 2048;
  uint64_t seed = 1;
  int num_threads = 0;
  std::function<void(const StudentTrainProgress&)> on_progress = {};
};

struct StudentTrainReport {
  StudentEval before, after;
  int64_t steps = 0, examples = 0;
  double seconds = 0;
  std::vector<StudentTrainProgress> curve;
  std::vector<float> adapter;  // A, [d][d] row-major: u = n + A·n
};

// teacher_* and student_* are the two models' features on the same tokens and chunks (train and
// held-out). `student` provides W and the soft-cap; it must share the teacher's vocabulary and width.
Result<StudentTrainReport> train_student_adapter(const Model& student, const TeacherFeatures& teacher_train,
                                                 const TeacherFeatures& student_train, const TeacherFeatures& teacher_held,
                                                 const TeacherFeatures& student_held, const StudentTrainOptions& o);

// The mean loss over the positions with the adapter, and its gradient (grad_a, d x d, written): the
// training step's own computation, for the finite-difference check.
Result<double> student_loss(const Model& student, std::span<const float> adapter, const TeacherFeatures& teacher,
                            const TeacherFeatures& features, std::span<const int64_t> positions,
                            const grad::LossOptions& loss, std::span<float> grad_a);

// The student's file with its output matrix replaced by W · (I + A), re-encoded in its type.
Status write_student(const std::string& student_path, const std::string& out_path, const Model& student,
                     std::span<const float> adapter, const std::vector<std::pair<std::string, std::string>>& info,
                     int num_threads = 0);

}  // namespace kvasir::compress
