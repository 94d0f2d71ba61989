#ifndef SHARDPS_TRAINER_CLIENT_TABLE_NORMS_H_
#define SHARDPS_TRAINER_CLIENT_TABLE_NORMS_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/transport/ps_client_interface.h"
#include "trainer/client/placement.h"
#include "trainer/transport/request_stamp.h"

namespace shardps {

// Where LARS's norms meet (docs/tuning.md, "LARS"). A table's blocks live on
// several pservers, and its trust ratio needs the norms of the whole table;
// the trainers, which know the placement, carry them between the pservers.
// Not thread-safe (one exchange at a time, after the trainer's push).
class TableNormExchange {
 public:
  // `servers[s]` holds the blocks of chunks[s] (ParamClient's plan);
  // all three must outlive the exchange.
  TableNormExchange(const std::vector<PsClientInterface*>& servers,
                    const ChunkPlan& chunks, RequestStamp* stamp)
      : servers_(servers), chunks_(chunks), stamp_(stamp) {}

  // SYNC, after this trainer's push of `step`: asks every pserver for the
  // squared norms of the blocks of the tables `lars` marks (indexed by
  // table id), answered once each block has assembled the step; sums them
  // per table in (table, block) order, so that every trainer gets the same
  // bits; and sends each pserver the norms of the tables it holds blocks
  // of, which applies the step there. The pservers take the first
  // trainer's norms; the others' change nothing.
  absl::Status Exchange(int64_t step, const std::vector<bool>& lars);

 private:
  // Squared norms (weights, gradient) per table.
  using Sums = std::map<uint32_t, std::pair<double, double>>;
  // Per pserver, the LARS tables it holds blocks of, and those blocks.
  using TablesOf = std::vector<std::map<uint32_t, std::vector<uint32_t>>>;

  // The block norms of step `step` from every pserver holding LARS blocks,
  // summed per table; *pulls gets the requests (to wait with after a
  // failover) and *tables_of what each pserver holds.
  absl::StatusOr<Sums> PullNorms(
      int64_t step, const std::vector<bool>& lars,
      std::map<PsClientInterface*, PullRequest>* pulls, TablesOf* tables_of);
  // The tables' norms to every pserver holding their blocks.
  absl::Status PushNorms(
      int64_t step, Sums sums, const TablesOf& tables_of,
      const std::map<PsClientInterface*, PullRequest>& pulls);

  const std::vector<PsClientInterface*>& servers_;
  const ChunkPlan& chunks_;
  RequestStamp* const stamp_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_TABLE_NORMS_H_
