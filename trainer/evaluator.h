#ifndef SHARDPS_TRAINER_EVALUATOR_H_
#define SHARDPS_TRAINER_EVALUATOR_H_

#include <cmath>
#include <cstdint>

#include "absl/status/statusor.h"
#include "trainer/client/sparse_client.h"
#include "trainer/input_pipeline.h"
#include "trainer/model/model.h"

namespace shardps {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  double auc = std::nan("");      // binary tasks
  double logloss = std::nan("");  // binary tasks
};

// Evaluates `model` on the whole test set of `input`, in batches of 1000,
// pulling the sparse rows each batch needs with `min_version` (their bytes
// are added to *pull_bytes). The dense parameters must be in the model
// already.
absl::StatusOr<EvalResult> Evaluate(Model* model, InputPipeline* input,
                                    SparseClient* client, int64_t min_version,
                                    int64_t step, int64_t* pull_bytes);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_EVALUATOR_H_
