// Checkpoints of a replicated job's sparse tables: a pserver holds several
// shards of a table (a unit each), whose rows share the table's blob; a
// restore puts each row back in the shard of its key, full or delta.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/model_export/exported_model.h"
#include "common/placement/shard_map.h"
#include "common/storage/checkpoint.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/checkpoint/job_checkpoint.h"
#include "pserver/checkpoint/model_export.h"
#include "pserver/checkpoint/reshard.h"
#include "pserver/checkpoint/row_export.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/store/sparse/sparse_shard.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::Options;

constexpr int kServers = 3;

// Async, one trainer, a sparse table of rows of 2 (Adagrad), replicated
// twice: this pserver (index 1 of 3) holds shards 0 and 1.
JobSpec Job() {
  JobSpec job;
  job.set_mode(ASYNC);
  job.set_num_trainers(1);
  job.set_max_staleness(-1);
  job.set_global_batch_size(1);
  job.set_replication(2);
  TableSpec* t = job.add_tables();
  t->set_name("e");
  t->set_kind(TableSpec::SPARSE);
  t->mutable_sparse()->set_dim(2);
  t->mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  t->mutable_optimizer()->set_learning_rate(0.1f);
  return job;
}

// Pserver `index` of kServers: it holds shards index - 1 and index.
std::unique_ptr<ParameterStore> NewStore(int index = 1) {
  auto store = std::make_unique<ParameterStore>(Options());
  const int before = (index + kServers - 1) % kServers;
  EXPECT_TRUE(store
                  ->InitJob(Job(), {},
                            {std::min(before, index), std::max(before, index)})
                  .ok());
  EXPECT_TRUE(store->CommitInit().ok());
  EXPECT_TRUE(
      store->state()->AdoptPlacement(testing::Place(index, kServers)).ok());
  return store;
}

// Pushes keys [first, first + n) of the shards `store` holds, each to its
// shard.
void Push(ParameterStore* store, int64_t step, uint64_t first, int n) {
  for (uint64_t k = first; k < first + n; ++k) {
    const int shard = SparseKeyServer(k, kServers);
    if (!store->state()->tables->FindSparse(0, shard).ok()) continue;
    const std::vector<uint64_t> keys = {k};
    const std::vector<float> g = {0.01f * static_cast<float>(k % 13), -0.5f};
    std::vector<SparseGrads> rows = {{0, keys, g, 1, shard}};
    ASSERT_TRUE(store->PushSparse(0, step, rows, kAnyGeneration).ok());
  }
}

// Each shard's rows: key -> value.
std::map<int, std::map<uint64_t, std::vector<float>>> Rows(
    ParameterStore* store) {
  std::map<int, std::map<uint64_t, std::vector<float>>> out;
  for (SparseShard* s : store->state()->tables->sparse()) {
    auto& rows = out[static_cast<int>(s->index())];
    std::vector<uint64_t> keys;
    std::vector<float> values;
    EXPECT_EQ(*SparseRowExport::Page(s->rows(), 0, 1 << 20, &keys, &values),
              SparseRowExport::kEnd);
    for (size_t i = 0; i < keys.size(); ++i) {
      rows[keys[i]] = {values[2 * i], values[2 * i + 1]};
    }
  }
  return out;
}

TEST(ShardedSparseTest, EachRowGoesBackToTheShardOfItsKey) {
  testing::ScopedTempDir tmp("sharded");
  Checkpointer checkpointer(Env::Default(), tmp.Path("ckpt"), /*keep=*/2,
                            /*full_every=*/2);
  auto store = NewStore();
  Push(store.get(), 0, 0, 200);
  absl::Status previous;
  ASSERT_TRUE(
      StoreSnapshots(store.get()).SaveTo(&checkpointer, 1, &previous).ok());
  ASSERT_TRUE(checkpointer.Flush().ok());
  const auto at1 = Rows(store.get());
  ASSERT_EQ(at1.size(), 2u);
  EXPECT_GT(at1.at(0).size(), 40u);
  EXPECT_GT(at1.at(1).size(), 40u);
  // A delta: keys 150..349 (some new, some updated).
  Push(store.get(), 1, 150, 200);
  ASSERT_TRUE(
      StoreSnapshots(store.get()).SaveTo(&checkpointer, 2, &previous).ok());
  ASSERT_TRUE(checkpointer.Flush().ok());
  const auto at2 = Rows(store.get());

  for (int64_t step : {1, 2}) {
    auto chain = checkpointer.LoadChain(step);
    ASSERT_TRUE(chain.ok()) << chain.status();
    EXPECT_EQ(chain->back().info.sparse_shards_size(), 2);
    std::vector<const StoreSnapshot*> links;
    for (const StoreSnapshot& s : *chain) links.push_back(&s);
    ParameterStore restored(Options());
    ASSERT_TRUE(StoreSnapshots(&restored).RestoreChain(links, 1).ok());
    EXPECT_TRUE(restored.state()->tables->sharded_sparse());
    EXPECT_EQ(Rows(&restored), step == 1 ? at1 : at2) << "step " << step;
  }
  // A rollback on the running store: back to step 1.
  auto chain = checkpointer.LoadChain(1);
  ASSERT_TRUE(chain.ok());
  ASSERT_TRUE(StoreSnapshots(store.get()).RestoreChain({&(*chain)[0]}, 2).ok());
  EXPECT_EQ(Rows(store.get()), at1);
}

// Three pservers, each a shard's primary and the previous one's backup,
// resharded onto two (each then holds both shards) and exported: every row
// once, from its primary, with its value.
TEST(ShardedSparseTest, ReshardAndExportTakeEachRowOnce) {
  testing::ScopedTempDir tmp("sharded");
  std::map<uint64_t, std::vector<float>> all;
  for (int i = 0; i < kServers; ++i) {
    auto store = NewStore(i);
    Push(store.get(), 0, 0, 300);
    for (const auto& [shard, rows] : Rows(store.get())) {
      for (const auto& [k, v] : rows) {
        auto [it, added] = all.emplace(k, v);
        EXPECT_EQ(it->second, v) << "key " << k;  // a backup's copy
      }
    }
    auto snap = StoreSnapshots(store.get()).Snapshot(1);
    ASSERT_TRUE(snap.ok()) << snap.status();
    std::vector<CheckpointFile> files;
    for (const auto& [name, data] : snap->files) files.push_back({name, data});
    ASSERT_TRUE(
        CheckpointWriter(
            Env::Default(),
            JoinPath(tmp.Path("three/ps-" + std::to_string(i)), "default"))
            .Write(1, snap->info.SerializeAsString(), files)
            .ok());
  }
  EXPECT_EQ(all.size(), 300u);
  auto three = FindJobCheckpoint(Env::Default(), tmp.Path("three"), "default");
  ASSERT_TRUE(three.ok()) << three.status();

  auto two = ReshardJob(Env::Default(), *three, tmp.Path("two"), 2, nullptr);
  ASSERT_TRUE(two.ok()) << two.status();
  for (int i = 0; i < 2; ++i) {
    auto shard = ReshardShard(Env::Default(), *two, i, 2, nullptr);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->info.sparse_shards_size(), 2);
    ParameterStore store(Options());
    ASSERT_TRUE(StoreSnapshots(&store).Restore(*shard, 1).ok());
    const auto rows = Rows(&store);
    ASSERT_EQ(rows.size(), 2u);
    for (int s = 0; s < 2; ++s) {
      std::map<uint64_t, std::vector<float>> want;
      for (const auto& [k, v] : all) {
        if (SparseKeyServer(k, 2) == s) want[k] = v;
      }
      EXPECT_EQ(rows.at(s), want) << "pserver " << i << " shard " << s;
    }
  }

  auto exported = ExportModel(Env::Default(), *three, tmp.Path("model"),
                              ExportOptions(), nullptr);
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto table = ExportedSparseTable::Read(
      Env::Default(), JoinPath(tmp.Path("model"), SparseFileName("e")));
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 300);
  for (const auto& [k, v] : all) {
    float got[2];
    EXPECT_TRUE(table->Lookup(k, got));
    EXPECT_EQ(std::vector<float>(got, got + 2), v) << "key " << k;
  }
}

}  // namespace
}  // namespace shardps
