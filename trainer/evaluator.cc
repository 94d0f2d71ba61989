#include "trainer/evaluator.h"

#include <algorithm>
#include <vector>

#include "base/status_macros.h"
#include "trainer/model/auc.h"

namespace shardps {
namespace {

constexpr int kEvalBatch = 1000;

}  // namespace

absl::StatusOr<EvalResult> Evaluate(Model* model, InputPipeline* input,
                                    SparseClient* client, int64_t min_version,
                                    int64_t step, int64_t* pull_bytes) {
  BatchStats total;
  const bool binary = model->num_classes() == 2;
  const int out_dim = model->output_dim();
  std::vector<float> probs, p1;
  std::vector<int32_t> labels;
  const int64_t n_test = input->test_records();
  for (int64_t start = 0; start < n_test; start += kEvalBatch) {
    const int n =
        static_cast<int>(std::min<int64_t>(kEvalBatch, n_test - start));
    input->LoadTestBatch(start, n);
    TransferStats ps;
    RETURN_IF_ERROR(input->PullRows(client, min_version, step, &ps));
    *pull_bytes += ps.bytes;
    probs.resize(static_cast<size_t>(n) * out_dim);
    ASSIGN_OR_RETURN(BatchStats s, model->Evaluate(input->x(), input->labels(),
                                                   n, probs.data()));
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
    if (binary) {
      for (int i = 0; i < n; ++i) {
        p1.push_back(out_dim == 1 ? probs[i] : probs[2 * i + 1]);
        labels.push_back(input->labels()[i]);
      }
    }
  }
  EvalResult r;
  if (total.count > 0) {
    r.loss = total.loss_sum / total.count;
    r.accuracy = static_cast<double>(total.correct) / total.count;
  }
  if (binary && !p1.empty()) {
    r.auc = Auc(p1, labels);
    r.logloss = LogLoss(p1, labels);
  }
  return r;
}

}  // namespace shardps
