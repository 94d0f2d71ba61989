#include "pserver/checkpoint/reshard.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "common/storage/blob_io.h"
#include "common/storage/checkpoint.h"
#include "glog/logging.h"
#include "pserver/checkpoint/blob_records.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/checkpoint/store_snapshots.h"

namespace shardps {
namespace {

constexpr uint32_t kDenseMagic = 0x44534e31;   // "DSN1"
constexpr uint32_t kSparseMagic = 0x53505432;  // "SPT2"

int Replication(const JobSpec& job) { return std::max(1, job.replication()); }

// Whether pserver `server` of `num_servers` holds shard `shard`: as its
// primary, or as one of its backups.
bool HoldsShard(int shard, int server, int num_servers, int replication) {
  for (int s : ReplicaServers(shard, replication, num_servers)) {
    if (s == server) return true;
  }
  return false;
}

// Whether pserver `server` of `num_servers` holds block `block` of dense
// table `t`.
bool HoldsBlock(const TableSpec& t, int64_t block, int server, int num_servers,
                int replication) {
  return HoldsShard(DenseBlockServer(TableHash(t.name()), block, num_servers),
                    server, num_servers, replication);
}

// One table of the shard being built: the records taken so far.
struct TableOut {
  // Dense: the DSN1 records (raw) and which blocks they are.
  std::string records;
  std::set<uint32_t> blocks_taken;
  std::set<uint32_t> blocks_wanted;
  // Sparse: the rows and sightings (raw), their counts and the header.
  std::string rows, sightings;
  uint64_t num_rows = 0, num_sightings = 0;
  int32_t dim = -1, row_floats = -1;
};

// Takes from the DSN1 blob `blob` of source shard `source` (of
// `from_servers`) the blocks `out` wants whose primary it is.
absl::Status TakeDense(absl::string_view name, absl::string_view blob,
                       const TableSpec& t, int source, int from_servers,
                       int replication, TableOut* out) {
  return ForEachDenseRecord(
      name, blob, t, [&](const DenseRecord& d) -> absl::Status {
        if (!HoldsBlock(t, d.index, source, from_servers, replication)) {
          return absl::DataLossError(absl::StrCat(name, ": block ", d.index,
                                                  " is in shard ", source,
                                                  ", which does not hold it"));
        }
        // With replication a block is in several shards: its primary's
        // copy is the one taken.
        const int primary =
            DenseBlockServer(TableHash(t.name()), d.index, from_servers);
        if (primary == source && out->blocks_wanted.count(d.index) != 0) {
          if (!out->blocks_taken.insert(d.index).second) {
            return absl::DataLossError(
                absl::StrCat(name, ": block ", d.index, " appears twice"));
          }
          out->records.append(d.raw.data(), d.raw.size());
        }
        return absl::OkStatus();
      });
}

// Takes from the SPT2 blob `blob` of source shard `source` the rows and
// sightings whose keys land on `server` of `num_servers`. With
// replication a key is in its shard's primary and backups, on both sides:
// the primary's copy is taken, for every pserver that holds the key's new
// shard.
absl::Status TakeSparse(absl::string_view name, absl::string_view blob,
                        int want_dim, int source, int from_servers, int server,
                        int num_servers, int replication, TableOut* out) {
  auto header = [&](int32_t dim, int32_t row_floats) -> absl::Status {
    if (dim != want_dim) {
      return absl::DataLossError(absl::StrCat(
          name, ": rows of dim ", dim, "; the job's table has dim ", want_dim));
    }
    if (out->dim < 0) {
      out->dim = dim;
      out->row_floats = row_floats;
    } else if (out->dim != dim || out->row_floats != row_floats) {
      return absl::DataLossError(absl::StrCat(
          name, ": rows of dim ", dim, " and ", row_floats,
          " floats; another shard has ", out->dim, " and ", out->row_floats));
    }
    return absl::OkStatus();
  };
  // Whether the source holds `key` (DATA_LOSS otherwise), and whether its
  // copy goes to `server`.
  auto take = [&](uint64_t key, const char* what) -> absl::StatusOr<bool> {
    const int from_shard = SparseKeyServer(key, from_servers);
    if (!HoldsShard(from_shard, source, from_servers, replication)) {
      return absl::DataLossError(absl::StrCat(name, ": the ", what, " of key ",
                                              key, " is in shard ", source,
                                              ", which does not hold it"));
    }
    return from_shard == source && HoldsShard(SparseKeyServer(key, num_servers),
                                              server, num_servers, replication);
  };
  auto row = [&](const SparseRecord& r) -> absl::Status {
    ASSIGN_OR_RETURN(const bool wanted, take(r.key, "row"));
    if (wanted) {
      out->rows.append(r.raw.data(), r.raw.size());
      ++out->num_rows;
    }
    return absl::OkStatus();
  };
  auto sighting = [&](uint64_t key, absl::string_view raw) -> absl::Status {
    ASSIGN_OR_RETURN(const bool wanted, take(key, "sighting"));
    if (wanted) {
      out->sightings.append(raw.data(), raw.size());
      ++out->num_sightings;
    }
    return absl::OkStatus();
  };
  return ForEachSparseRecord(name, blob, header, row, sighting);
}

// Merges the shard-wide parts of the sources' metadata into `info`.
void MergeInfo(const CheckpointInfo& source, CheckpointInfo* info) {
  info->set_generation(std::max(info->generation(), source.generation()));
  for (int t = 0; t < source.clocks_size(); ++t) {
    if (t >= info->clocks_size()) info->add_clocks(0);
    info->set_clocks(t, std::max(info->clocks(t), source.clocks(t)));
  }
  std::set<int> left(info->left_trainers().begin(),
                     info->left_trainers().end());
  left.insert(source.left_trainers().begin(), source.left_trainers().end());
  info->clear_left_trainers();
  for (int t : left) info->add_left_trainers(t);
  std::set<int> dropped(info->dropped_trainers().begin(),
                        info->dropped_trainers().end());
  dropped.insert(source.dropped_trainers().begin(),
                 source.dropped_trainers().end());
  info->clear_dropped_trainers();
  for (int t : dropped) info->add_dropped_trainers(t);
}

std::string FinishTable(const TableSpec& t, TableOut& out) {
  std::string blob;
  if (t.kind() == TableSpec::SPARSE) {
    AppendPod(&blob, kSparseMagic);
    // Every source shard has the table's blob, so its header was read.
    AppendPod<int32_t>(&blob, out.dim);
    AppendPod<int32_t>(&blob, out.row_floats);
    AppendPod<uint64_t>(&blob, 1);
    AppendPod<uint64_t>(&blob, out.num_rows);
    blob.append(out.rows);
    AppendPod<uint64_t>(&blob, out.num_sightings);
    blob.append(out.sightings);
  } else {
    AppendPod(&blob, kDenseMagic);
    AppendPod<uint32_t>(&blob, static_cast<uint32_t>(out.blocks_taken.size()));
    blob.append(out.records);
  }
  std::string().swap(out.records);
  std::string().swap(out.rows);
  std::string().swap(out.sightings);
  return blob;
}

// The metadata of shard `index` of `num_servers` (its blocks, placement),
// and the blocks each dense table of it wants.
CheckpointInfo PlanShard(const JobCheckpoint& from, int index, int num_servers,
                         std::vector<TableOut>* tables) {
  const JobSpec& job = from.shards[0].info.job();
  CheckpointInfo info;
  info.set_step(from.step);
  *info.mutable_job() = job;
  ShardPlacement* pl = info.mutable_placement();
  pl->set_server_index(index);
  pl->set_num_servers(num_servers);
  pl->set_scheme(kPlacementScheme);
  tables->assign(job.tables_size(), TableOut());
  bool sparse = false;
  for (int t = 0; t < job.tables_size(); ++t) {
    const TableSpec& spec = job.tables(t);
    sparse = sparse || spec.kind() == TableSpec::SPARSE;
    if (spec.kind() == TableSpec::SPARSE) continue;
    const int64_t nb = NumBlocks(NumValues(spec), spec.block_size());
    for (int64_t b = 0; b < nb; ++b) {
      if (HoldsBlock(spec, b, index, num_servers, Replication(job))) {
        (*tables)[t].blocks_wanted.insert(static_cast<uint32_t>(b));
        BlockRef* r = info.add_blocks();
        r->set_table_id(t);
        r->set_block(static_cast<uint32_t>(b));
      }
    }
  }
  // A replicated job's sparse shards held (its primary's and those it
  // backs), as the pserver records them (CheckpointInfo.sparse_shards).
  if (sparse && Replication(job) > 1) {
    for (int s = 0; s < num_servers; ++s) {
      if (HoldsShard(s, index, num_servers, Replication(job))) {
        info.add_sparse_shards(s);
      }
    }
  }
  return info;
}

// Takes from source shard `s` of `from` what shard `index` of
// `num_servers` holds.
absl::Status TakeFromShard(Env* env, const JobCheckpoint& from, int s,
                           int index, int num_servers,
                           const ReshardProgress& progress,
                           std::vector<TableOut>* tables) {
  const JobSpec& job = from.shards[0].info.job();
  const ShardCheckpoint& shard = from.shards[s];
  ASSIGN_OR_RETURN(StoreSnapshot loaded,
                   LoadShardState(env, shard.folder, from.step));
  if (progress) {
    int64_t bytes = 0;
    for (const auto& [name, data] : loaded.files) bytes += data.size();
    progress(absl::StrFormat(
        "pserver %d of %d: read shard %d of %d (%s, %.1f MB)", index,
        num_servers, s, from.num_servers, shard.folder, bytes / 1e6));
  }
  const std::string dir = JoinPath(shard.folder, CheckpointDirName(from.step));
  std::vector<bool> seen(job.tables_size(), false);
  for (auto& [file, data] : loaded.files) {
    const std::string name = JoinPath(dir, file);
    int t = -1;
    for (int i = 0; i < job.tables_size(); ++i) {
      if (file == TableFileName(i)) t = i;
    }
    if (t < 0 || seen[t]) {
      return absl::DataLossError(absl::StrCat(
          name, t < 0 ? ": not a table of the job" : ": listed twice"));
    }
    seen[t] = true;
    const TableSpec& spec = job.tables(t);
    if (spec.kind() == TableSpec::SPARSE) {
      RETURN_IF_ERROR(TakeSparse(name, data, spec.sparse().dim(), s,
                                 from.num_servers, index, num_servers,
                                 Replication(job), &(*tables)[t]));
    } else {
      RETURN_IF_ERROR(TakeDense(name, data, spec, s, from.num_servers,
                                Replication(job), &(*tables)[t]));
    }
    std::string().swap(data);
  }
  for (int t = 0; t < job.tables_size(); ++t) {
    if (!seen[t]) {
      return absl::DataLossError(absl::StrCat(dir, ": no ", TableFileName(t),
                                              " (table ", job.tables(t).name(),
                                              ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StoreSnapshot> LoadShardState(Env* env,
                                             const std::string& folder,
                                             int64_t step) {
  ASSIGN_OR_RETURN(std::vector<StoreSnapshot> chain,
                   Checkpointer(env, folder).LoadChain(step));
  return StoreSnapshots::Materialize(chain);
}

absl::StatusOr<StoreSnapshot> ReshardShard(Env* env, const JobCheckpoint& from,
                                           int index, int num_servers,
                                           const ReshardProgress& progress) {
  if (from.shards.empty()) {
    return absl::InvalidArgumentError("reshard: the job checkpoint is empty");
  }
  const JobSpec& job = from.shards[0].info.job();
  if (num_servers < 1 || num_servers > kMaxPservers || index < 0 ||
      index >= num_servers) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard: pserver ", index, " of ", num_servers,
                     " (at most ", kMaxPservers, " pservers)"));
  }
  if (Replication(job) > num_servers) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard: the job keeps ", Replication(job),
                     " copies of each block and needs at least that many "
                     "pservers, not ",
                     num_servers));
  }
  StoreSnapshot snap;
  std::vector<TableOut> tables;
  snap.info = PlanShard(from, index, num_servers, &tables);
  for (int s = 0; s < from.num_servers; ++s) {
    MergeInfo(from.shards[s].info, &snap.info);
    RETURN_IF_ERROR(
        TakeFromShard(env, from, s, index, num_servers, progress, &tables));
  }
  for (int t = 0; t < job.tables_size(); ++t) {
    TableOut& out = tables[t];
    for (uint32_t b : out.blocks_wanted) {
      if (out.blocks_taken.count(b) == 0) {
        return absl::DataLossError(absl::StrCat(
            "reshard: block ", b, " of table ", job.tables(t).name(),
            " is in no shard of the checkpoint of step ", from.step));
      }
    }
    snap.files.emplace_back(TableFileName(t), FinishTable(job.tables(t), out));
  }
  return snap;
}

absl::StatusOr<JobCheckpoint> ReshardJob(Env* env, const JobCheckpoint& from,
                                         const std::string& to, int num_servers,
                                         const ReshardProgress& progress) {
  if (env->FileExists(to).ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("reshard: ", to, " exists; give a new folder"));
  }
  const std::string tmp = to + ".tmp";
  if (env->FileExists(tmp).ok()) {
    LOG(WARNING) << "removing " << tmp << ", left by a reshard that died";
    RETURN_IF_ERROR(env->DeleteDir(tmp));
  }
  RETURN_IF_ERROR(env->CreateDir(tmp));
  JobCheckpoint out;
  out.job_id = from.job_id;
  out.step = from.step;
  out.num_servers = num_servers;
  for (int i = 0; i < num_servers; ++i) {
    ASSIGN_OR_RETURN(StoreSnapshot snap,
                     ReshardShard(env, from, i, num_servers, progress));
    const std::string folder =
        JoinPath(JoinPath(tmp, absl::StrCat("pserver-", i)), from.job_id);
    std::vector<CheckpointFileView> views;
    int64_t bytes = 0;
    for (const auto& [name, data] : snap.files) {
      views.push_back(CheckpointFileView{name, data});
      bytes += data.size();
    }
    RETURN_IF_ERROR(
        CheckpointWriter(env, folder, 1)
            .WriteViews(from.step, snap.info.SerializeAsString(), views));
    ASSIGN_OR_RETURN(CheckpointHeader header,
                     CheckpointReader(env, folder).LoadHeader(from.step));
    ShardCheckpoint shard;
    shard.folder = folder;
    shard.info = std::move(snap.info);
    shard.manifest_crc = header.manifest_crc;
    shard.bytes = header.bytes;
    out.generation = std::max(out.generation, shard.info.generation());
    out.shards.push_back(std::move(shard));
    if (progress) {
      progress(absl::StrFormat("pserver %d of %d: wrote %s (%.1f MB)", i,
                               num_servers, folder, bytes / 1e6));
    }
  }
  RETURN_IF_ERROR(WriteJobManifest(env, tmp, out));
  RETURN_IF_ERROR(env->RenameFile(tmp, to));
  const size_t slash = to.find_last_of('/');
  RETURN_IF_ERROR(env->SyncDir(slash == std::string::npos
                                   ? "."
                                   : (slash == 0 ? "/" : to.substr(0, slash))));
  for (ShardCheckpoint& s : out.shards) {
    s.folder = to + s.folder.substr(tmp.size());
  }
  out.manifest_path = JobManifestPath(to, out.job_id, out.step);
  return out;
}

}  // namespace shardps
