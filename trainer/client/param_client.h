#ifndef SHARDPS_TRAINER_CLIENT_PARAM_CLIENT_H_
#define SHARDPS_TRAINER_CLIENT_PARAM_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/ps_client_interface.h"
#include "compression/pull_delta.h"
#include "compression/threshold_push_encoder.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/placement.h"
#include "trainer/client/transfer.h"
#include "trainer/transport/request_stamp.h"
#include "trainer/transport/shared_memory_client.h"
#include "trainer/transport/tcp_lane_client.h"

namespace shardps {

// The trainer's view of the dense parameters on all pservers: pulls and
// pushes split by the shard map into chunks of at most 4 MiB (PlanChunks),
// all in flight at once, one or more calls per pserver. A pull or push may
// be started and waited for later (StartPull, StartPush), so that it
// overlaps with the trainer's computation. Thread-compatible: one thread
// calls it at a time. `servers` and `stamp` must outlive it.
class ParamClient {
 public:
  ParamClient(std::vector<PsClientInterface*> servers, RequestStamp* stamp,
              std::vector<DenseTableLayout> tables);

  // How dense values travel: pushes as FLOAT32, FLOAT16 or BFLOAT16, pulls
  // as FLOAT32, FLOAT16, BFLOAT16 or THRESHOLD (compressed pulls,
  // docs/compression.md: the changes since the copy this client keeps of
  // each block; the first pull, and any after the pserver lost its shadow,
  // is dense). The pservers keep float32 master values. Default: FLOAT32
  // both ways.
  void set_encodings(ValueEncoding push, ValueEncoding pull);
  // Threshold encoding of dense pushes (docs/compression.md); pulls stay as
  // set by set_encodings.
  void set_threshold_compression(const ThresholdPushEncoder::Options& o);
  // The threshold encoder (its statistics, sent masks and residuals); null
  // without threshold compression.
  ThresholdPushEncoder* threshold_encoder() { return threshold_.get(); }

  // Fills values[t] (num_values floats each) once every block has applied
  // `min_version` updates (sync) and the staleness bound allows `step`.
  // ASYNC: with `min_clock` > 0, also waits until every trainer has pushed
  // that many steps. DATA_LOSS for a reply that does not match the request.
  absl::Status Pull(int64_t min_version, int64_t step,
                    const std::vector<float*>& values, TransferStats* stats,
                    int64_t min_clock = 0);
  // Pull, started: `values` is written until the transfer has ended. ASYNC:
  // with `own_clock` > 0, answered once this trainer's pushes of the steps
  // below it have been applied (a pull sent with the push before it).
  // With `only` (indexed by table id), only the blocks of the tables it
  // marks (a layer's, --overlap in sync mode).
  std::unique_ptr<Transfer> StartPull(int64_t min_version, int64_t step,
                                      const std::vector<float*>& values,
                                      int64_t min_clock = 0,
                                      int64_t own_clock = 0,
                                      const std::vector<bool>* only = nullptr);
  // Sends grads[t] for `step`. A retried call keeps its request id, so the
  // pserver applies it once.
  absl::Status Push(int64_t step, const std::vector<const float*>& grads,
                    TransferStats* stats);
  // Push, started: float32 values are sent from `grads` itself, which must
  // stay unchanged until the transfer has ended (the threshold encoder's
  // state is updated at once).
  // With `only`, the blocks of the tables it marks, as StartPull.
  absl::StatusOr<std::unique_ptr<Transfer>> StartPush(
      int64_t step, const std::vector<const float*>& grads,
      const std::vector<bool>* only = nullptr);
  // ASYNC: tells every pserver that this trainer has finished `steps`
  // steps, with an empty push tagged steps (after all its pushes were
  // acknowledged), so that a pull with min_clock = steps + 1 sees every
  // update of every trainer.
  absl::Status MarkDone(int64_t steps);

  const ChunkPlan& chunks() const { return chunks_; }

  // SYNC, LARS (docs/tuning.md, "LARS"), after this trainer's push of
  // `step`: the norms of the tables `lars` marks, through the pservers that
  // hold their blocks (TableNormExchange, table_norms.h).
  absl::Status ExchangeTableNorms(int64_t step, const std::vector<bool>& lars);

  // Moves dense values through shared memory (SharedMemoryPsClient) with
  // every pserver on this host that offers it: float32 pushes and pulls
  // then carry only offsets over gRPC, and the values are copied through a
  // region both processes map. Pservers on other hosts (or in other PID
  // namespaces, or of other users) stay on TCP, as do compressed values.
  // Replaces the regions in use. Returns how many pservers use one. Call
  // with no transfer in flight. A pserver that loses a trainer's region (it
  // restarted) answers NOT_FOUND; the call is then sent again over TCP,
  // which that pserver keeps until the next UseSharedMemory.
  // With `calls`, pushes and pulls that go through a region are also sent
  // through it (common/shared_memory/shared_calls.h) rather than over gRPC,
  // when the pserver serves them.
  int UseSharedMemory(bool calls = true);
  // How many pservers use shared memory now.
  int shared_servers() const;
  // Ends the calls in flight through shared regions CANCELLED at once
  // (SharedCaller::CancelPending), as PsClientInterface::CancelCalls does
  // for gRPC calls. For a trainer that stops: a cancelled pull's late
  // answer still writes the region's values. Call from the thread that
  // made the regions.
  void CancelSharedCalls();
  // Moves float32 dense values over the TCP lane (TcpLanePsClient,
  // docs/wire_protocol.md "TCP lane") with every pserver that holds none
  // of this trainer's shared regions and serves one; the log says why
  // where it does not. Replaces the lanes in use. Call after
  // UseSharedMemory, with no transfer in flight; the transfers to a
  // pserver with a lane go in calls of tcp_lane::kChunkBytes from then on
  // (chunks()). Returns how many pservers use one.
  int UseTcpLane(const TcpLanePsClient::Options& options);
  // How many pservers use the TCP lane now (lost lanes not counted).
  int tcp_lane_servers() const;
  // Whether pserver s holds a block of this trainer's tables (a small
  // model may leave one empty), and how many do.
  bool Holds(size_t s) const;
  int holding_servers() const;

 private:
  // A pull or push of one chunk of one pserver, in flight.
  struct PullCall;
  struct PushCall;
  // The pull of chunk c of server s into `values`, of the tables `only`
  // marks (null: all; none marked: null), stamped, without its versions.
  std::unique_ptr<PullCall> MakePullCall(size_t s, size_t c,
                                         const std::vector<float*>& values,
                                         const std::vector<bool>* only) const;
  // The push of chunk c of server s for `step`: stamped, its values
  // encoded (float32 values stay where they are).
  absl::Status FillPushCall(size_t s, size_t c, int64_t step,
                            const std::vector<const float*>& grads,
                            const std::vector<bool>* only, PushCall* p);
  // Where dense values of server s go: through its shared region when it
  // has one (SharedMemoryPsClient), to the server otherwise.
  PsClientInterface* Dense(size_t s) const {
    if (s < shared_.size() && shared_[s] != nullptr) return shared_[s].get();
    if (s < tcp_.size() && tcp_[s] != nullptr) return tcp_[s].get();
    return servers_[s];
  }
  // Transfer::run_queued_ for this client's TCP lanes; null when it
  // has none.
  std::function<bool()> LaneRunner() const;

  const std::vector<PsClientInterface*> servers_;
  RequestStamp* const stamp_;
  const std::vector<DenseTableLayout> tables_;
  // Per server; UseTcpLane cuts a lane's into smaller calls.
  ChunkPlan chunks_;
  ValueEncoding push_encoding_ = FLOAT32;
  ValueEncoding pull_encoding_ = FLOAT32;
  std::unique_ptr<ThresholdPushEncoder> threshold_;
  // Per server; null: its values go over TCP.
  std::vector<std::unique_ptr<SharedMemoryPsClient>> shared_;
  // Per server; null: no TCP lane (its values go through gRPC or shared
  // memory).
  std::vector<std::unique_ptr<TcpLanePsClient>> tcp_;
  // Compressed pulls: the copy of each block; null otherwise.
  std::unique_ptr<PullDeltaDecoder> deltas_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_PARAM_CLIENT_H_
