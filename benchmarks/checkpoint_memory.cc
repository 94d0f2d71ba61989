// A pserver's peak resident memory while it checkpoints a large sparse
// table (docs/fault_tolerance.md, "Checkpoints"): the store of one pserver
// with one sparse table (Adagrad, `--dim` floats a row, `--rows` rows) is
// filled, then saved to `--dir` either as a streaming save (what the
// pserver does: StoreSnapshots::SaveTo) or as a copy of the store first
// (`--mode=copy`: Snapshot then Checkpointer::Save, how saves were made
// before), while `--steps_during` steps of `--keys_per_step` rows spread
// over the table are pushed (each stripe is then written by a push, as it
// was before the push, unless the save's own pass got there first). Prints
// one
// JSON line: the table's bytes, the resident memory before and its peak
// during the save (VmHWM, reset first), and the checkpoint's size and time.
//
//   checkpoint_memory --rows=4000000 --dim=64 --dir=/tmp/ckpt-mem
//       [--mode=streaming|copy] [--steps_during=20] [--keys_per_step=65536]
//
// Run each mode in a process of its own: the peak is the process's.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/storage/env.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/store/parameter_store.h"

DEFINE_int64(rows, 4000000, "rows in the sparse table");
DEFINE_int32(dim, 64, "floats a row");
DEFINE_string(dir, "/tmp/shardps-checkpoint-memory", "checkpoint folder");
DEFINE_string(mode, "streaming", "streaming (the pserver's) or copy");
DEFINE_int32(steps_during, 20, "steps pushed during the save");
DEFINE_int64(keys_per_step, 65536,
             "rows a step during the save updates, spread over the table");

namespace shardps {
namespace {

constexpr int64_t kBatch = 1 << 16;

// A /proc/self/status field in bytes.
int64_t StatusBytes(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoll(line.substr(field.size() + 1)) * 1024;
    }
  }
  return -1;
}

// Sets VmHWM to the current RSS.
void ResetPeak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

// One step: a push of `count` rows' gradients, spread over the table
// (stride rows / count, from `offset`), in batches.
void Step(ParameterStore* store, int64_t step, int64_t count, int64_t offset) {
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> grads(kBatch * FLAGS_dim, 0.01f);
  std::vector<SparseGrads> rows(1);
  const int64_t stride = std::max<int64_t>(1, FLAGS_rows / count);
  const int64_t chunks = (count + kBatch - 1) / kBatch;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t n = std::min(kBatch, count - c * kBatch);
    for (int64_t i = 0; i < n; ++i) {
      keys[i] = static_cast<uint64_t>(((c * kBatch + i) * stride + offset) %
                                      FLAGS_rows);
    }
    rows[0].keys = absl::MakeConstSpan(keys.data(), n);
    rows[0].grads = absl::MakeConstSpan(grads.data(), n * FLAGS_dim);
    rows[0].num_chunks = static_cast<int32_t>(chunks);
    absl::Status s = store->PushSparse(0, step, rows, kAnyGeneration);
    CHECK(s.ok()) << s;
  }
}

int Run() {
  JobSpec job;
  job.set_mode(SYNC);
  job.set_num_trainers(1);
  job.set_global_batch_size(1);
  TableSpec* t = job.add_tables();
  t->set_name("embeddings");
  t->set_kind(TableSpec::SPARSE);
  t->mutable_sparse()->set_dim(FLAGS_dim);
  t->mutable_sparse()->mutable_init()->set_type(RowInitializer::UNIFORM);
  t->mutable_sparse()->mutable_init()->set_scale(0.05f);
  t->mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  t->mutable_optimizer()->set_learning_rate(0.1f);
  ParameterStore store{StoreOptions{}};
  CHECK(store.InitJob(job, {}).ok());
  CHECK(store.CommitInit().ok());
  const absl::Time t0 = absl::Now();
  Step(&store, 0, FLAGS_rows, 0);
  const double fill_s = absl::ToDoubleSeconds(absl::Now() - t0);
  const int64_t table_bytes =
      static_cast<int64_t>(store.SparseStats()[0].memory_bytes);

  Env* env = Env::Default();
  if (env->FileExists(FLAGS_dir).ok()) CHECK(env->DeleteDir(FLAGS_dir).ok());
  Checkpointer checkpointer(env, FLAGS_dir, 1);
  const int64_t rss_before = StatusBytes("VmRSS");
  ResetPeak();
  const absl::Time s0 = absl::Now();
  if (FLAGS_mode == "copy") {
    auto snap = StoreSnapshots(&store).Snapshot(1);
    CHECK(snap.ok()) << snap.status();
    CHECK(checkpointer.Save(std::move(*snap)).ok());
  } else {
    CHECK(FLAGS_mode == "streaming") << "--mode: streaming or copy";
    absl::Status previous;
    absl::Status s = StoreSnapshots(&store).SaveTo(&checkpointer, 1, &previous);
    CHECK(s.ok()) << s;
  }
  for (int i = 0; i < FLAGS_steps_during; ++i) {
    Step(&store, 1 + i, std::min(FLAGS_keys_per_step, FLAGS_rows), i);
  }
  CHECK(checkpointer.Flush().ok());
  const double save_s = absl::ToDoubleSeconds(absl::Now() - s0);
  const int64_t peak = StatusBytes("VmHWM");
  const auto stats = checkpointer.stats();
  std::cout << absl::StrFormat(
                   "{\"mode\":\"%s\",\"rows\":%d,\"dim\":%d,"
                   "\"table_bytes\":%d,\"rss_before\":%d,\"peak_rss\":%d,"
                   "\"peak_over_table\":%.3f,\"peak_over_rss_before\":%.3f,"
                   "\"checkpoint_bytes\":%d,\"fill_s\":%.2f,"
                   "\"save_and_steps_s\":%.2f,\"steps_during\":%d,"
                   "\"keys_per_step\":%d}",
                   FLAGS_mode, FLAGS_rows, FLAGS_dim, table_bytes, rss_before,
                   peak, static_cast<double>(peak) / table_bytes,
                   static_cast<double>(peak) / rss_before, stats.last_bytes,
                   fill_s, save_s, FLAGS_steps_during, FLAGS_keys_per_step)
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  google::InitGoogleLogging(argv[0]);
  return shardps::Run();
}
