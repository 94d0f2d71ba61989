#include "pserver/checkpoint/model_export.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "common/model_export/exported_model.h"
#include "common/placement/shard_map.h"
#include "common/storage/checkpoint.h"
#include "glog/logging.h"
#include "pserver/checkpoint/blob_records.h"
#include "pserver/store/table_snapshot.h"

namespace shardps {
namespace {

// One table as it is gathered.
struct Gathered {
  // Dense: the values, and which blocks have come.
  std::vector<float> values;
  std::vector<bool> have;
  // Sparse: keys and values (dim floats each), in the order read.
  std::vector<uint64_t> keys;
  std::vector<float> rows;
  int dim = 0;
};

absl::Status GatherShard(Env* env, const JobCheckpoint& from, int s,
                         std::vector<Gathered>* tables) {
  const JobSpec& job = from.shards[0].info.job();
  const ShardCheckpoint& shard = from.shards[s];
  ASSIGN_OR_RETURN(StoreSnapshot loaded,
                   LoadShardState(env, shard.folder, from.step));
  const std::string dir = JoinPath(shard.folder, CheckpointDirName(from.step));
  for (auto& [file, data] : loaded.files) {
    int t = -1;
    for (int i = 0; i < job.tables_size(); ++i) {
      if (file == TableFileName(i)) t = i;
    }
    const std::string name = JoinPath(dir, file);
    if (t < 0) {
      return absl::DataLossError(
          absl::StrCat(name, ": not a table of the job"));
    }
    const TableSpec& spec = job.tables(t);
    Gathered& g = (*tables)[t];
    if (spec.kind() == TableSpec::SPARSE) {
      RETURN_IF_ERROR(ForEachSparseRecord(
          name, data,
          [&](int32_t dim, int32_t) {
            if (dim != spec.sparse().dim()) {
              return absl::DataLossError(
                  absl::StrCat(name, ": rows of dim ", dim, "; table ",
                               spec.name(), " has dim ", spec.sparse().dim()));
            }
            g.dim = dim;
            return absl::OkStatus();
          },
          [&](const SparseRecord& r) {
            // Replication: a row is in its shard's primary and backups;
            // the primary's copy is the one taken.
            if (job.replication() > 1 &&
                SparseKeyServer(r.key, from.num_servers) != s) {
              return absl::OkStatus();
            }
            g.keys.push_back(r.key);
            const size_t at = g.rows.size();
            g.rows.resize(at + g.dim);
            std::memcpy(g.rows.data() + at, r.row, sizeof(float) * g.dim);
            return absl::OkStatus();
          },
          [](uint64_t, absl::string_view) { return absl::OkStatus(); }));
    } else {
      RETURN_IF_ERROR(
          ForEachDenseRecord(name, data, spec, [&](const DenseRecord& d) {
            if (!g.have[d.index]) {
              std::memcpy(g.values.data() + d.index * spec.block_size(),
                          d.values, sizeof(float) * d.size);
              g.have[d.index] = true;
            }
            return absl::OkStatus();
          }));
    }
    std::string().swap(data);
  }
  return absl::OkStatus();
}

// Adds dense table `spec`, gathered in `g`, to the tables of params.bin;
// DATA_LOSS when a block of it is in no shard.
absl::Status AddDenseTable(const TableSpec& spec, const Gathered& g,
                           std::vector<DenseTensorView>* dense,
                           ExportSummary* summary) {
  for (size_t b = 0; b < g.have.size(); ++b) {
    if (!g.have[b]) {
      return absl::DataLossError(
          absl::StrCat("export: block ", b, " of table ", spec.name(),
                       " is in no shard of the checkpoint"));
    }
  }
  dense->push_back(DenseTensorView{
      spec.name(), {spec.shape().begin(), spec.shape().end()}, g.values});
  ++summary->dense_tables;
  summary->dense_values += static_cast<int64_t>(g.values.size());
  return absl::OkStatus();
}

// Writes sparse table `spec`, gathered in `g` (emptied then), to its own
// file in `dir`, its rows by ascending key; INVALID_ARGUMENT when its name
// cannot be a file name.
absl::Status ExportSparseTable(Env* env, const TableSpec& spec, Gathered& g,
                               const ExportOptions& options,
                               const std::string& dir, ExportSummary* summary) {
  // Its name becomes a file name.
  bool plain = !spec.name().empty() && spec.name().size() <= 200 &&
               spec.name()[0] != '.';
  for (char c : spec.name()) {
    plain = plain && (absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                      c == '.' || c == '_' || c == '-');
  }
  if (!plain) {
    return absl::InvalidArgumentError(absl::StrCat(
        "export: sparse table '", spec.name().substr(0, 80),
        "': a name of 1 to 200 of A-Z a-z 0-9 . _ - is needed for its file"));
  }
  // By ascending key: a permutation, then the rows in that order.
  std::vector<uint32_t> order(g.keys.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&g](uint32_t a, uint32_t b) { return g.keys[a] < g.keys[b]; });
  std::vector<uint64_t> keys(order.size());
  std::vector<float> values(order.size() * static_cast<size_t>(g.dim));
  for (size_t i = 0; i < order.size(); ++i) {
    keys[i] = g.keys[order[i]];
    std::memcpy(values.data() + i * g.dim, g.rows.data() + order[i] * g.dim,
                sizeof(float) * g.dim);
  }
  std::vector<uint64_t>().swap(g.keys);
  std::vector<float>().swap(g.rows);
  SparseTableView view;
  view.name = spec.name();
  view.dim = spec.sparse().dim();
  view.init = spec.sparse().init();
  view.fp16 = options.fp16;
  view.keys = keys;
  view.values = values;
  RETURN_IF_ERROR(
      WriteSparseTable(env, JoinPath(dir, SparseFileName(spec.name())), view));
  ++summary->sparse_tables;
  summary->sparse_rows += static_cast<int64_t>(keys.size());
  return absl::OkStatus();
}

// Writes the gathered tables into `dir`.
absl::Status WriteTables(Env* env, const JobSpec& job,
                         std::vector<Gathered>& tables,
                         const ExportOptions& options, const std::string& dir,
                         ExportSummary* summary) {
  std::vector<DenseTensorView> dense;
  for (int t = 0; t < job.tables_size(); ++t) {
    const TableSpec& spec = job.tables(t);
    if (spec.kind() != TableSpec::SPARSE) {
      RETURN_IF_ERROR(AddDenseTable(spec, tables[t], &dense, summary));
    } else {
      RETURN_IF_ERROR(
          ExportSparseTable(env, spec, tables[t], options, dir, summary));
    }
  }
  RETURN_IF_ERROR(WriteFileAtomically(env, JoinPath(dir, "params.bin"),
                                      EncodeParams(dense)));
  if (!options.config_text.empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(env, JoinPath(dir, "model.pbtxt"),
                                        options.config_text));
  }
  return env->SyncDir(dir);
}

}  // namespace

absl::StatusOr<ExportSummary> ExportModel(Env* env, const JobCheckpoint& from,
                                          const std::string& out,
                                          const ExportOptions& options,
                                          const ReshardProgress& progress) {
  if (from.shards.empty()) {
    return absl::InvalidArgumentError("export: the job checkpoint is empty");
  }
  if (env->FileExists(out).ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("export: ", out, " exists; give a new folder"));
  }
  const std::string tmp = out + ".tmp";
  if (env->FileExists(tmp).ok()) RETURN_IF_ERROR(env->DeleteDir(tmp));
  RETURN_IF_ERROR(env->CreateDir(tmp));
  const JobSpec& job = from.shards[0].info.job();
  std::vector<Gathered> tables(job.tables_size());
  for (int t = 0; t < job.tables_size(); ++t) {
    const TableSpec& spec = job.tables(t);
    if (spec.kind() == TableSpec::SPARSE) continue;
    tables[t].values.assign(NumValues(spec), 0.0f);
    tables[t].have.assign(NumBlocks(NumValues(spec), spec.block_size()), false);
  }
  for (int s = 0; s < from.num_servers; ++s) {
    RETURN_IF_ERROR(GatherShard(env, from, s, &tables));
    if (progress) {
      progress(absl::StrFormat("read shard %d of %d (%s)", s, from.num_servers,
                               from.shards[s].folder));
    }
  }
  ExportSummary summary;
  RETURN_IF_ERROR(WriteTables(env, job, tables, options, tmp, &summary));
  RETURN_IF_ERROR(env->RenameFile(tmp, out));
  const size_t slash = out.find_last_of('/');
  RETURN_IF_ERROR(env->SyncDir(slash == std::string::npos ? "."
                               : slash == 0               ? "/"
                                            : out.substr(0, slash)));
  return summary;
}

}  // namespace shardps
