#ifndef SHARDPS_TRAINER_CLIENT_PARAM_CLIENT_H_
#define SHARDPS_TRAINER_CLIENT_PARAM_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "compression/threshold_control.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/ps_client_interface.h"

namespace shardps {

// One dense table as the trainer holds it: a flat float buffer.
struct DenseTableLayout {
  std::string name;
  int64_t num_values = 0;
  int64_t block_size = 0;
};

// Bytes and time of one pull or push over all pservers.
struct TransferStats {
  int64_t bytes = 0;  // serialized payload, requests or replies
  int64_t rpcs = 0;
  int64_t server_wait_us = 0;  // pulls: longest time held by a pserver
  int64_t min_version = -1;    // dense pulls: lowest block version received
};

// Where one block lives and which part of its table it covers.
struct BlockPlacement {
  uint32_t table_id = 0;
  uint32_t block = 0;
  int64_t offset = 0;  // first value within the table
  int64_t size = 0;
};

// The rows of one sparse table that a pull wants or a push sends: distinct
// keys, and keys.size() * dim floats to fill (pull) or to send (push).
struct SparseTransfer {
  uint32_t table_id = 0;  // index in the job's tables
  int dim = 0;
  absl::Span<const uint64_t> keys;
  float* rows = nullptr;         // pulls: filled
  const float* grads = nullptr;  // pushes: sent
};

// Cuts the blocks of `tables` into chunks per pserver: chunks[s][c] lists
// the blocks of call c to pserver s, at most kMaxChunkBytes of values each
// (a single larger block gets a call of its own). Pure function.
std::vector<std::vector<std::vector<BlockPlacement>>> PlanChunks(
    const std::vector<DenseTableLayout>& tables, int num_servers,
    size_t max_chunk_bytes);

// The trainer's view of the dense parameters on all pservers: splits pulls
// and pushes by the shard map into chunks of at most 4 MiB and sends all of
// them at once, one or more calls per pserver, in parallel. Thread-compatible:
// one thread calls it at a time. `servers` must outlive it.
class ParamClient {
 public:
  ParamClient(std::vector<PsClientInterface*> servers, int trainer_id,
              std::vector<DenseTableLayout> tables);

  // How dense values travel: pushes as FLOAT32, FLOAT16 or BFLOAT16, pulls
  // as FLOAT32, FLOAT16 or BFLOAT16 (the pservers keep float32 master
  // values). Default: FLOAT32 both ways.
  void set_encodings(ValueEncoding push, ValueEncoding pull) {
    push_encoding_ = push;
    pull_encoding_ = pull;
  }

  // Threshold encoding of dense pushes (docs/compression.md): one
  // GradientCompressor, with its residual, per block. Pulls stay as set by
  // set_encodings.
  struct ThresholdOptions {
    bool adaptive = true;         // DL4J's adaptive algorithm, else fixed
    double threshold = 1e-3;      // fixed value, or the adaptive start
    bool clip = false;            // residual clipping (5, 5)
    int64_t shake_frequency = 0;  // shake-up bitmap every N steps; 0: off
    bool use_residual = true;     // false: drop what is not sent
    // Adaptive: the band of sent fraction the threshold keeps to.
    double min_sparsity = 1e-4;
    double max_sparsity = 1e-2;
  };
  void set_threshold_compression(const ThresholdOptions& options) {
    threshold_ = options;
    use_threshold_ = true;
  }
  // Of the pushes since the last call: messages per format, elements sent
  // and in all, the mean threshold used, non-finite steps skipped.
  struct CompressionStats {
    int64_t threshold_messages = 0;
    int64_t bitmap_messages = 0;
    int64_t empty_messages = 0;
    int64_t nonfinite_messages = 0;
    int64_t selected = 0;
    int64_t elements = 0;
    double threshold_sum = 0;
    int64_t threshold_count = 0;
  };
  CompressionStats TakeCompressionStats();

  // Threshold compression: after a Push, which values of table `t` the
  // messages changed (1) this step, for momentum masking on the trainer.
  const std::vector<uint8_t>& sent_mask(size_t t) const {
    return sent_masks_[t];
  }

  // Registers this trainer with every pserver.
  absl::Status Register(uint64_t incarnation);

  // Fault tolerance (docs/fault_tolerance.md). The timeline sent with every
  // pull and push: a pserver on another one answers ABORTED.
  void set_generation(uint64_t generation) { generation_ = generation; }
  // This process's incarnation, sent with every pull and push so that a
  // pserver refuses a replaced process. 0 (the default): not sent.
  void set_incarnation(uint64_t incarnation) { incarnation_ = incarnation; }
  uint64_t generation() const { return generation_; }
  // Joins the job in two phases (RegisterRequest): returns the step this
  // trainer starts at, which every pserver now waits for.
  absl::StatusOr<int64_t> Join(uint64_t incarnation);
  // Leaves the barrier on every pserver.
  absl::Status Leave(uint64_t incarnation);
  // Chief: every pserver writes a checkpoint of `step`.
  absl::Status Checkpoint(int64_t step);
  // Every pserver's status, in --pservers order.
  absl::StatusOr<std::vector<GetStatusResponse>> Statuses();
  // Every pserver rolls back to its checkpoint of `step` as `generation`.
  absl::Status Rollback(int64_t step, uint64_t generation);
  // Threshold compression: forgets the residuals (after a rollback).
  void ResetCompression();

  // Chief only: sends the job spec and the initial values to every pserver
  // and marks the job ready. If the pservers already hold the job (a
  // restarted chief), their values are kept.
  absl::Status InitJob(const JobSpec& job,
                       const std::vector<const float*>& initial_values);

  // Waits until every pserver reports the job ready, logging whom it waits
  // for every 10 s; DEADLINE_EXCEEDED after `timeout`. Then checks that the
  // pservers' job equals `expected` (FAILED_PRECONDITION naming the
  // difference otherwise).
  absl::Status WaitUntilReady(const JobSpec& expected, absl::Duration timeout);

  // Fills values[t] (num_values floats each) once every block has applied
  // `min_version` updates (sync) and the staleness bound allows `step`.
  // ASYNC: with `min_clock` > 0, also waits until every trainer has pushed
  // that many steps.
  absl::Status Pull(int64_t min_version, int64_t step,
                    const std::vector<float*>& values, TransferStats* stats,
                    int64_t min_clock = 0);

  // Sends grads[t] for `step`. A retried call keeps its request id, so the
  // pserver applies it once.
  absl::Status Push(int64_t step, const std::vector<const float*>& grads,
                    TransferStats* stats);

  // ASYNC: tells every pserver that this trainer has finished `steps`
  // steps, with an empty push tagged steps (after all its pushes were
  // acknowledged), so that a pull with min_clock = steps + 1 sees every
  // update of every trainer.
  absl::Status MarkDone(int64_t steps);

  // Sparse tables: keys go to pserver Mix64(key) % P, in calls of at most
  // 4 MiB of keys and values, all in flight at once. Pull fills each
  // transfer's rows once the tables have applied `min_version` steps
  // (sync). Push sends each transfer's grads for `step`; in sync mode every
  // pserver gets at least one (possibly empty) chunk of every table, with
  // the chunk count, so that it knows when this trainer's step is complete.
  absl::Status PullSparse(int64_t min_version, int64_t step,
                          const std::vector<SparseTransfer>& tables,
                          TransferStats* stats);
  absl::Status PushSparse(int64_t step, bool sync,
                          const std::vector<SparseTransfer>& tables,
                          TransferStats* stats);

  const std::vector<std::vector<std::vector<BlockPlacement>>>& chunks() const {
    return chunks_;
  }

 private:
  uint64_t NextRequestId();
  // Encodes block `b`'s gradient with its compressor into `out` (empty
  // bytes: a zero gradient).
  absl::Status EncodeThreshold(const BlockPlacement& b,
                               absl::Span<const float> grad, std::string* out);

  const std::vector<PsClientInterface*> servers_;
  const int trainer_id_;
  const std::vector<DenseTableLayout> tables_;
  const std::vector<std::vector<std::vector<BlockPlacement>>> chunks_;
  std::mt19937_64 id_rng_;
  uint64_t generation_ = 0;
  uint64_t incarnation_ = 0;
  ValueEncoding push_encoding_ = FLOAT32;
  ValueEncoding pull_encoding_ = FLOAT32;
  bool use_threshold_ = false;
  ThresholdOptions threshold_;
  // Per (table, block): created on the first push.
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<GradientCompressor>>
      compressors_;
  CompressionStats compression_stats_;
  std::vector<int32_t> message_;                  // scratch
  std::vector<std::vector<uint8_t>> sent_masks_;  // per table
  std::vector<float> decoded_;                    // scratch
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_PARAM_CLIENT_H_
