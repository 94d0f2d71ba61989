#include "trainer/client/sparse_export.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "common/model_export/exported_model.h"
#include "common/storage/env.h"
#include "glog/logging.h"

namespace shardps {

absl::Status SaveSparseTables(JobClient* client, const JobSpec& job,
                              int64_t min_version, const std::string& dir) {
  for (int t = 0; t < job.tables_size(); ++t) {
    const TableSpec& spec = job.tables(t);
    if (spec.kind() != TableSpec::SPARSE) continue;
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(
        JobClient::SparseRows rows,
        client->ReadSparseTable(static_cast<uint32_t>(t), min_version));
    if (!rows.keys.empty() && rows.dim != spec.sparse().dim()) {
      return absl::DataLossError(absl::StrCat(
          "--save_dir: sparse table ", spec.name(), " has rows of ", rows.dim,
          " values on the pservers; its spec says ", spec.sparse().dim()));
    }
    SparseTableView view;
    view.name = spec.name();
    view.dim = spec.sparse().dim();
    view.init = spec.sparse().init();
    view.keys = rows.keys;
    view.values = rows.values;
    const std::string path = JoinPath(dir, SparseFileName(spec.name()));
    RETURN_IF_ERROR(WriteSparseTable(Env::Default(), path, view));
    LOG(INFO) << absl::StrFormat(
        "sparse table %s saved to %s: %d rows, %.1f MB, in %.1f s", spec.name(),
        path, rows.keys.size(), rows.values.size() * sizeof(float) / 1e6,
        absl::ToDoubleSeconds(absl::Now() - start));
  }
  return absl::OkStatus();
}

}  // namespace shardps
