// What a hostile or buggy client sends (docs/security.md, "Limits"): each
// request that could make the pserver allocate far more than it carries,
// hold what it should free, or accept a job it cannot hold, gets its exact
// status, and the job goes on unchanged. A regression test per finding.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "common/transport/wire_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/service/request_handler.h"
#include "pserver/testing/handler_testing.h"
#include "pserver/testing/store_testing.h"

#if defined(__SANITIZE_ADDRESS__)
#define PS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PS_UNDER_ASAN 1
#endif
#endif
#ifndef PS_UNDER_ASAN
#define PS_UNDER_ASAN 0
#endif

namespace shardps {
namespace {

using testing::FloatBytes;
using ::testing::HasSubstr;
using testing::KeyBytes;

constexpr int64_t kBig = int64_t{1} << 20;  // values per block of "big"

class HostileRequestTest : public ::testing::Test {
 protected:
  // "w": 6 values in blocks of 4 and 2; "big": 4 blocks of 2^20 values;
  // "emb": sparse rows of 65536 floats. SGD, 2 trainers, sync.
  static JobSpec Job(int trainers = 2) {
    return testing::MakeJobSpec(
        SYNC, trainers,
        {testing::DenseTableSpec("w", 6, 4, testing::Sgd(0.5f)),
         testing::DenseTableSpec("big", 4 * kBig, kBig, testing::Sgd(0.5f)),
         testing::SparseTableSpec("emb", 1 << 16, testing::Sgd(0.5f))});
  }

  absl::Status InitJob(const JobSpec& job) {
    InitJobRequest req;
    req.set_trainer_id(0);
    *req.mutable_job() = job;
    for (uint32_t b = 0; b < 2; ++b) req.add_blocks()->set_block(b);
    for (uint32_t b = 0; b < 4; ++b) {
      BlockRef* r = req.add_blocks();
      r->set_table_id(1);
      r->set_block(b);
    }
    InitJobResponse resp;
    return handler_->InitJob(req, &resp);
  }

  void StartJob() {
    ASSERT_TRUE(InitJob(Job()).ok());
    SetInitialValuesRequest vreq;
    DenseBlock* b0 = vreq.add_blocks();
    b0->set_values(FloatBytes({1, 2, 3, 4}));
    DenseBlock* b1 = vreq.add_blocks();
    b1->set_block(1);
    b1->set_values(FloatBytes({5, 6}));
    SetInitialValuesResponse vresp;
    ASSERT_TRUE(handler_->SetInitialValues(vreq, &vresp).ok());
    const std::string zeros = FloatBytes(std::vector<float>(kBig, 0.0f));
    for (uint32_t b = 0; b < 4; ++b) {
      SetInitialValuesRequest big;
      DenseBlock* block = big.add_blocks();
      block->set_table_id(1);
      block->set_block(b);
      block->set_values(zeros);
      ASSERT_TRUE(handler_->SetInitialValues(big, &vresp).ok());
    }
    CommitInitResponse cresp;
    ASSERT_TRUE(handler_->CommitInit(CommitInitRequest(), &cresp).ok());
  }

  absl::Status Pull(const PullRequest& req, PullResponse* resp) {
    return testing::PullAndWait(handler_.get(), req, resp);
  }

  // Table "w" as trainer 0 sees it.
  std::vector<float> W() {
    PullRequest req;
    req.set_incarnation(1);  // trainer 0's, where a test registers it
    req.add_blocks()->set_block(0);
    req.add_blocks()->set_block(1);
    PullResponse resp;
    EXPECT_TRUE(Pull(req, &resp).ok());
    std::vector<float> out;
    for (const auto& b : resp.blocks()) {
      auto v = testing::BytesToFloats(b.values());
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

  // Starts `n` pulls of trainer 0 for version 1 of "w" (which stays at 0)
  // and sweeps past --max_pull_wait_s: each is answered DEADLINE_EXCEEDED.
  void TimeOutPulls(int n) {
    std::vector<std::unique_ptr<testing::PullResult>> pulls;
    for (int i = 0; i < n; ++i) {
      testing::PullArgs a;
      a.min_version = 1;
      pulls.push_back(testing::StartPull(store_.get(), a, {{0, 0}, {0, 1}}));
    }
    clock_.Advance(absl::Seconds(21));
    store_->Sweep(clock_.Now());
    for (auto& p : pulls) {
      ASSERT_TRUE(p->done.HasBeenNotified());
      EXPECT_EQ(p->status.code(), absl::StatusCode::kDeadlineExceeded);
    }
  }

  static void ExpectCode(const absl::Status& s, absl::StatusCode code,
                         const std::string& needle) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(needle));
  }

  StoreOptions Options() {
    StoreOptions o;
    o.clock = &clock_;
    return o;
  }

  FakeClock clock_;
  std::unique_ptr<ParameterStore> store_ =
      std::make_unique<ParameterStore>(Options());
  std::unique_ptr<RequestHandler> handler_ =
      std::make_unique<RequestHandler>(store_.get(), nullptr, &clock_);
  const std::vector<float> w0_ = {1, 2, 3, 4, 5, 6};
};

// Finding: "an 800-byte pull naming one block 400 times peaked at 818 MiB".
TEST_F(HostileRequestTest, PullNamingABlockTwiceIsRefused) {
  StartJob();
  PullRequest req;
  for (int i = 0; i < 400; ++i) {
    BlockRef* r = req.add_blocks();
    r->set_table_id(1);
    r->set_block(2);
  }
  PullResponse resp;
  ExpectCode(Pull(req, &resp), absl::StatusCode::kInvalidArgument,
             "table id 1 block 2 is named twice in one request");
  EXPECT_EQ(resp.ByteSizeLong(), 0u);
}

TEST_F(HostileRequestTest, PullOfMoreThanAChunkIsRefused) {
  StartJob();
  PullRequest req;
  for (uint32_t b = 0; b < 2; ++b) {
    BlockRef* r = req.add_blocks();
    r->set_table_id(1);
    r->set_block(b);
  }
  PullResponse resp;
  ExpectCode(Pull(req, &resp), absl::StatusCode::kResourceExhausted,
             "one request carries at most 4194304");
  // One block of 4 MiB is what a trainer asks for; so is "w" whole.
  req.mutable_blocks()->RemoveLast();
  EXPECT_TRUE(Pull(req, &resp).ok());
  EXPECT_EQ(W(), w0_);
}

TEST_F(HostileRequestTest, SparsePullOfMoreThanAChunkIsRefused) {
  StartJob();
  PullRequest req;
  SparseRows* rows = req.add_sparse();
  rows->set_table_id(2);
  // 100 rows of 65536 floats: 25 MiB of answer from 800 bytes of keys.
  std::vector<uint64_t> keys(100);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  rows->set_keys(KeyBytes(keys));
  PullResponse resp;
  ExpectCode(Pull(req, &resp), absl::StatusCode::kResourceExhausted,
             "asks for 100 sparse rows");
  // One row is always allowed, however wide.
  rows->set_keys(KeyBytes({7}));
  EXPECT_TRUE(Pull(req, &resp).ok());
  EXPECT_EQ(resp.sparse(0).values().size(), (size_t{1} << 16) * 4);
}

// Finding: "a 16 KB push of empty THRESHOLD blocks allocated 1.5 GB".
TEST_F(HostileRequestTest, PushOfRepeatedThresholdBlocksIsRefused) {
  StartJob();
  PushRequest req;
  req.set_request_id(1);
  for (int i = 0; i < 4000; ++i) {
    DenseBlock* b = req.add_blocks();
    b->set_table_id(1);
    b->set_block(i % 4);
    b->set_encoding(THRESHOLD);
  }
  PushResponse resp;
  ExpectCode(handler_->Push(req, &resp), absl::StatusCode::kInvalidArgument,
             "named twice in one request");
  // Distinct blocks, but more than one request may carry.
  req.mutable_blocks()->DeleteSubrange(4, 3996);
  req.set_request_id(2);
  ExpectCode(handler_->Push(req, &resp), absl::StatusCode::kResourceExhausted,
             "one request carries at most");
  EXPECT_EQ(W(), w0_);
  EXPECT_EQ(store_->Versions().max, 0);
}

// LARS's norms calls (docs/tuning.md) on tables without LARS, with
// repeated or unknown blocks and tables, or mixed with gradients, are
// refused before anything is allocated for them or applied.
TEST_F(HostileRequestTest, NormsRequestsWithoutLarsAreRefused) {
  StartJob();
  PullRequest pull;
  pull.set_lars_norms(true);
  for (int i = 0; i < 100000; ++i) {
    BlockRef* r = pull.add_blocks();
    r->set_table_id(1);
    r->set_block(0);
  }
  PullResponse resp;
  ExpectCode(Pull(pull, &resp), absl::StatusCode::kInvalidArgument,
             "table id 1 block 0 is named twice in one request");
  pull.mutable_blocks()->DeleteSubrange(1, 99999);
  pull.mutable_blocks(0)->set_block(7);
  ExpectCode(Pull(pull, &resp), absl::StatusCode::kNotFound, "");
  pull.mutable_blocks(0)->set_block(0);
  pull.set_min_version(INT64_MAX);
  ExpectCode(Pull(pull, &resp), absl::StatusCode::kInvalidArgument,
             "needs a step >= 0");
  pull.set_min_version(0);
  pull.mutable_blocks(0)->set_block(0);
  ExpectCode(Pull(pull, &resp), absl::StatusCode::kInvalidArgument,
             "only LARS blocks have");
  EXPECT_EQ(resp.ByteSizeLong(), 0u);
  PushRequest push;
  push.set_request_id(1);
  for (uint32_t t = 0; t < 2; ++t) {
    TableNorms* n = push.add_table_norms();
    n->set_table_id(t);
    n->set_weights(1);
    n->set_gradient(1);
  }
  PushResponse presp;
  ExpectCode(handler_->Push(push, &presp), absl::StatusCode::kInvalidArgument,
             "not a LARS block");
  push.mutable_table_norms(1)->set_table_id(0);
  push.set_request_id(2);
  ExpectCode(handler_->Push(push, &presp), absl::StatusCode::kInvalidArgument,
             "two norms in one push");
  push.mutable_table_norms()->RemoveLast();
  push.add_blocks()->set_block(0);
  push.set_request_id(3);
  ExpectCode(handler_->Push(push, &presp), absl::StatusCode::kInvalidArgument,
             "one kind only");
  EXPECT_EQ(W(), w0_);
  EXPECT_EQ(store_->Versions().max, 0);
}

// Finding: "InitJob with 2^31-1 trainers throws inside the store, leaves
// dangling block pointers, accepts a later valid job, and aborts on a later
// Leave".
TEST_F(HostileRequestTest, JobWithTooManyTrainersIsRefusedWhole) {
  ExpectCode(InitJob(Job(2147483647)), absl::StatusCode::kInvalidArgument,
             "num_trainers must be in [1, 65536], got 2147483647");
  EXPECT_FALSE(store_->ready());
  // The pserver took nothing from it: the real job starts and runs.
  StartJob();
  EXPECT_EQ(W(), w0_);
  LeaveRequest leave;
  leave.set_trainer_id(1);
  leave.set_incarnation(2);
  LeaveResponse lresp;
  RegisterRequest reg;
  reg.set_trainer_id(1);
  reg.set_incarnation(2);
  RegisterResponse rresp;
  ASSERT_TRUE(handler_->Register(reg, &rresp, "test").ok());
  EXPECT_TRUE(handler_->Leave(leave, &lresp).ok());
}

// Finding: "SetInitialValues and CommitInit ignore who sends them, so
// another client's values replace the chief's".
TEST_F(HostileRequestTest, OnlyTheChiefInitialisesAndTheDifferenceIsNamed) {
  ASSERT_TRUE(InitJob(Job()).ok());
  SetInitialValuesRequest vreq;
  vreq.set_trainer_id(1);
  vreq.add_blocks()->set_values(FloatBytes({9, 9, 9, 9}));
  SetInitialValuesResponse vresp;
  ExpectCode(handler_->SetInitialValues(vreq, &vresp),
             absl::StatusCode::kPermissionDenied, "only the chief");
  CommitInitRequest creq;
  creq.set_trainer_id(1);
  CommitInitResponse cresp;
  ExpectCode(handler_->CommitInit(creq, &cresp),
             absl::StatusCode::kPermissionDenied, "only the chief");
  EXPECT_FALSE(store_->ready());
  JobSpec other = Job();
  other.mutable_tables(0)->set_shape(0, 8);
  ExpectCode(InitJob(other), absl::StatusCode::kFailedPrecondition,
             "modified: tables[0].shape[0]: 8 -> 6");
}

TEST_F(HostileRequestTest, JobOverTheMemoryLimitIsRefused) {
  StoreOptions o = Options();
  o.max_memory_bytes = 16 << 20;  // "big" needs 32 MiB with its sums
  store_ = std::make_unique<ParameterStore>(o);
  handler_ = std::make_unique<RequestHandler>(store_.get(), nullptr, &clock_);
  ExpectCode(InitJob(Job()), absl::StatusCode::kResourceExhausted,
             "need 32 MiB on this pserver; --max_memory_mb=16");
  EXPECT_FALSE(store_->ready());
}

// New sparse rows past the table's share of --max_memory_mb take the place
// of the least recently updated ones (docs/sparse_memory.md) instead of
// being refused; the job goes on.
TEST_F(HostileRequestTest, SparseRowsPastTheLimitEvictTheOldest) {
  StoreOptions o = Options();
  o.max_memory_bytes = 40 << 20;  // the dense tables take 32 MiB
  store_ = std::make_unique<ParameterStore>(o);
  handler_ = std::make_unique<RequestHandler>(store_.get(), nullptr, &clock_);
  StartJob();
  auto push_rows = [&](uint64_t request_id, int64_t step, uint64_t first,
                       int n) {
    PushRequest req;
    req.set_trainer_id(0);
    req.set_request_id(request_id);
    req.set_step(step);
    SparseRows* rows = req.add_sparse();
    rows->set_table_id(2);
    rows->set_num_chunks(1);
    std::vector<uint64_t> keys(n);
    for (int i = 0; i < n; ++i) keys[i] = first + i;
    rows->set_keys(KeyBytes(keys));
    rows->set_values(FloatBytes(std::vector<float>(n * (1 << 16), 1.0f)));
    PushResponse resp;
    absl::Status s = handler_->Push(req, &resp);
    req.set_trainer_id(1);
    req.set_request_id(request_id + 1000);
    if (s.ok()) s = handler_->Push(req, &resp);
    return s;
  };
  // Rows of 256 KiB: the 8 MiB of room less an eighth of the limit for the
  // step's sums hold 11 of them (max_rows), not 64.
  for (int step = 0; step < 16; ++step) {
    absl::Status s = push_rows(1 + step, step, 4 * step, 4);
    ASSERT_TRUE(s.ok()) << step << " " << s;
  }
  const SparseCounters c = store_->SparseStats()[0].counters;
  EXPECT_EQ(c.refused_rows, 0);
  EXPECT_GT(c.max_rows, 0);
  EXPECT_LE(c.rows, c.max_rows);
  EXPECT_EQ(c.rows + c.evicted_full, 64);
  // The newest rows are there: the last push's keys 60..63 read as trained.
  // The job goes on: a row that exists still trains.
  ASSERT_TRUE(push_rows(100, 16, 60, 1).ok());
  EXPECT_EQ(store_->SparseStats()[0].counters.evicted_full, c.evicted_full);
}

// ExportRows reads every row's value: the chief's alone, in a ready job, at
// most 4 MiB of values a page however many rows are asked for.
TEST_F(HostileRequestTest, ExportRowsIsTheChiefsAndPagesAreBounded) {
  ExportRowsRequest req;
  req.set_table_id(2);
  req.set_max_rows(65536);
  ExportRowsResponse resp;
  ExpectCode(handler_->ExportRows(req, &resp),
             absl::StatusCode::kFailedPrecondition, "not initialized");
  StartJob();
  req.set_trainer_id(1);
  ExpectCode(handler_->ExportRows(req, &resp),
             absl::StatusCode::kPermissionDenied, "only the chief");
  req.set_trainer_id(0);
  // 40 rows of 65536 floats (10 MiB): pages of 16 rows.
  for (int step = 0; step < 10; ++step) {
    PushRequest push;
    push.set_step(step);
    SparseRows* rows = push.add_sparse();
    rows->set_table_id(2);
    rows->set_num_chunks(1);
    std::vector<uint64_t> keys = {4u * step, 4u * step + 1, 4u * step + 2,
                                  4u * step + 3};
    rows->set_keys(KeyBytes(keys));
    rows->set_values(FloatBytes(std::vector<float>(4 << 16, 1.0f)));
    PushResponse presp;
    for (int k = 0; k < 2; ++k) {
      push.set_trainer_id(k);
      push.set_request_id(1 + step + 1000 * k);
      const absl::Status s = handler_->Push(push, &presp);
      ASSERT_TRUE(s.ok()) << s;
    }
  }
  int rows = 0;
  std::vector<int> pages;
  do {
    ASSERT_TRUE(handler_->ExportRows(req, &resp).ok());
    EXPECT_LE(resp.values().size(), size_t{4} << 20);
    pages.push_back(resp.keys_size());
    rows += resp.keys_size();
    req.set_cursor(resp.next_cursor());
  } while (req.cursor() != 0 && pages.size() < 10);
  EXPECT_EQ(rows, 40);
  EXPECT_EQ(pages, (std::vector<int>{16, 16, 8}));
}

// Finding: "pulls that time out are removed from one list but not from
// their blocks' waiter lists: 12 such pulls took the pserver from 16 to 399
// MiB for good". A thousand pulls time out; the blocks hold none of them.
TEST_F(HostileRequestTest, TimedOutPullsAreLetGo) {
  StartJob();
  for (int round = 0; round < 100; ++round) TimeOutPulls(10);
  EXPECT_EQ(store_->waiting_pulls(), 0u);
  // Held by the blocks: only what the last round left, before the next
  // hold lets it go.
  EXPECT_LE(store_->TEST_HeldPulls(), 20u);
}

// Resident memory in KiB (Linux).
int64_t ResidentKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// The soak: 50,000 pulls that time out leave the pserver's memory where it
// was (each held one waiter, a few hundred bytes, for good before).
TEST_F(HostileRequestTest, TimedOutPullsHoldNoMemory) {
  StartJob();
  for (int r = 0; r < 100; ++r) TimeOutPulls(30);
  const int64_t before = ResidentKib();
  for (int r = 0; r < 1600; ++r) TimeOutPulls(30);
  const int64_t after = ResidentKib();
  EXPECT_LE(store_->TEST_HeldPulls(), 60u);
#if PS_UNDER_ASAN
  GTEST_SKIP() << "resident memory under AddressSanitizer includes its "
                  "quarantine of freed memory";
#endif
  ASSERT_GT(before, 0);
  EXPECT_LT(after - before, 2048) << before << " KiB, then " << after;
}

TEST_F(HostileRequestTest, WaitingPullsAreBounded) {
  StartJob();
  // 2 trainers, "big" is 4 chunks: (4 + 16) pulls each may wait.
  std::vector<std::unique_ptr<testing::PullResult>> pulls;
  for (int i = 0; i < 40; ++i) {
    testing::PullArgs a;
    a.min_version = 1;
    pulls.push_back(testing::StartPull(store_.get(), a, {{0, 0}}));
  }
  EXPECT_EQ(store_->waiting_pulls(), 40u);
  testing::PullArgs a;
  a.min_version = 1;
  auto refused = testing::StartPull(store_.get(), a, {{0, 0}});
  ASSERT_TRUE(refused->done.HasBeenNotified());
  ExpectCode(refused->status, absl::StatusCode::kResourceExhausted,
             "40 pulls wait on this pserver already");
  store_->CancelAllWaiters(absl::CancelledError("test over"));
}

// Finding: "finite gradients that sum to infinity are applied".
TEST_F(HostileRequestTest, GradientsWhoseSumCouldOverflowAreRefused) {
  StartJob();
  PushRequest req;
  req.set_trainer_id(0);
  req.set_request_id(1);
  DenseBlock* b = req.add_blocks();
  b->set_values(FloatBytes({3e38f, 0, 0, 0}));
  PushResponse resp;
  // Two trainers: each value must stay within FLT_MAX / 2.
  ExpectCode(handler_->Push(req, &resp), absl::StatusCode::kInvalidArgument,
             "gradient value 0 is 3e+38, beyond +-1.70141e+38");
  b->set_values(FloatBytes({1.7e38f, 0, 0, 0}));
  req.set_request_id(2);
  EXPECT_TRUE(handler_->Push(req, &resp).ok());
  EXPECT_EQ(W(), w0_);  // the step waits for trainer 1
}

// Finding: "a sync sparse push announcing 2^31-1 chunks stalls the step
// for good" (the bound; a trainer that then sends too few is dropped by
// TrainerThatStallsTheStepIsDropped below).
TEST_F(HostileRequestTest, SparseChunkCountIsBounded) {
  StartJob();
  PushRequest req;
  req.set_trainer_id(0);
  req.set_request_id(1);
  SparseRows* rows = req.add_sparse();
  rows->set_table_id(2);
  rows->set_num_chunks(2147483647);
  rows->set_keys(KeyBytes({1}));
  rows->set_values(FloatBytes(std::vector<float>(1 << 16, 0.5f)));
  PushResponse resp;
  ExpectCode(handler_->Push(req, &resp), absl::StatusCode::kInvalidArgument,
             "num_chunks must be in [1, 65536], got 2147483647");
}

// Finding: "a trainer that heartbeats but never pushes is never dropped".
TEST_F(HostileRequestTest, TrainerThatStallsTheStepIsDropped) {
  StartJob();
  for (int k = 0; k < 2; ++k) {
    RegisterRequest reg;
    reg.set_trainer_id(k);
    reg.set_incarnation(k + 1);
    RegisterResponse rresp;
    ASSERT_TRUE(handler_->Register(reg, &rresp, "test").ok());
  }
  PushRequest push;
  push.set_trainer_id(0);
  push.set_incarnation(1);
  push.set_request_id(1);
  push.add_blocks()->set_values(FloatBytes({1, 1, 1, 1}));
  DenseBlock* b1 = push.add_blocks();
  b1->set_block(1);
  b1->set_values(FloatBytes({1, 1}));
  PushResponse resp;
  ASSERT_TRUE(handler_->Push(push, &resp).ok());
  // Trainer 1 only heartbeats (and trainer 0 too, waiting for the step).
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(absl::Seconds(10));
    for (int k = 0; k < 2; ++k) {
      HeartbeatRequest hb;
      hb.set_trainer_id(k);
      hb.set_incarnation(k + 1);
      HeartbeatResponse hresp;
      // Trainer 1's are refused once it is dropped.
      absl::Status s = handler_->Heartbeat(hb, &hresp);
      if (k == 0) {
        ASSERT_TRUE(s.ok()) << s;
      }
    }
    store_->Sweep(clock_.Now());
    if (i < 5) {
      ASSERT_EQ(store_->LiveTrainers().size(), 2u) << i;
    }
  }
  EXPECT_EQ(store_->LiveTrainers(), std::vector<int>{0});
  // The step went ahead with trainer 0's gradient (SGD, lr 0.5).
  EXPECT_EQ(W(), (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}));
}

// A sync pull may ask for the next version, not one further on.
TEST_F(HostileRequestTest, SyncPullFarAheadIsRefused) {
  StartJob();
  PullRequest req;
  req.set_min_version(1000000000000000);
  req.add_blocks()->set_block(0);
  PullResponse resp;
  ExpectCode(Pull(req, &resp), absl::StatusCode::kInvalidArgument,
             "a trainer is at most one step ahead");
  EXPECT_EQ(store_->waiting_pulls(), 0u);
}

class AsyncHostileRequestTest : public HostileRequestTest {
 protected:
  // Sparse table "e" (dim 2) evicting rows not updated for 10 steps; two
  // registered trainers.
  void StartAsyncJob() {
    TableSpec e = testing::SparseTableSpec("e", 2, testing::Sgd(0.5f));
    e.mutable_sparse()->set_evict_after_steps(10);
    InitJobRequest init;
    *init.mutable_job() = testing::MakeJobSpec(ASYNC, 2, {e});
    InitJobResponse iresp;
    ASSERT_TRUE(handler_->InitJob(init, &iresp).ok());
    CommitInitResponse cresp;
    ASSERT_TRUE(handler_->CommitInit(CommitInitRequest(), &cresp).ok());
    for (int k = 0; k < 2; ++k) {
      RegisterRequest reg;
      reg.set_trainer_id(k);
      reg.set_incarnation(k + 1);
      RegisterResponse rresp;
      ASSERT_TRUE(handler_->Register(reg, &rresp, "test").ok());
    }
  }
  absl::Status PushRow(int trainer, int64_t step, uint64_t key) {
    PushRequest req;
    req.set_trainer_id(trainer);
    req.set_incarnation(trainer + 1);
    req.set_step(step);
    req.set_request_id(++request_id_);
    SparseRows* rows = req.add_sparse();
    rows->set_keys(KeyBytes({key}));
    rows->set_values(FloatBytes({1, 1}));
    PushResponse resp;
    return handler_->Push(req, &resp);
  }
  uint64_t request_id_ = 0;
};

// Finding: "in async mode a forged Checkpoint with a huge step makes
// retention delete the real checkpoints".
TEST_F(AsyncHostileRequestTest, CheckpointOfAStepNoTrainerReachedIsRefused) {
  StartAsyncJob();
  for (int64_t step = 0; step < 5; ++step)
    ASSERT_TRUE(PushRow(0, step, 1).ok());
  EXPECT_TRUE(StoreSnapshots(store_.get()).Snapshot(5).ok());
  auto forged = StoreSnapshots(store_.get()).Snapshot(1000000000);
  ExpectCode(forged.status(), absl::StatusCode::kInvalidArgument,
             "no trainer has pushed past step 5 here");
}

// Finding: "an async sparse push tagged step 10^15 evicts every row of the
// table, and eviction never runs again".
TEST_F(AsyncHostileRequestTest, StepFarAheadIsRefusedAndEvictsNothing) {
  StartAsyncJob();
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(PushRow(0, step, 1).ok());
    ASSERT_TRUE(PushRow(1, step, 2).ok());
  }
  ExpectCode(PushRow(1, 1000000000000000, 3),
             absl::StatusCode::kInvalidArgument,
             "a trainer moves at most 65536 steps between two");
  // Within the bound, a trainer far ahead of the other still evicts
  // nothing: eviction follows the slowest trainer.
  ASSERT_TRUE(PushRow(1, 60000, 3).ok());
  ASSERT_TRUE(PushRow(1, 60001, 4).ok());
  EXPECT_EQ(store_->SparseStats()[0].counters.evicted, 0);
  EXPECT_EQ(store_->SparseStats()[0].counters.rows, 4);
  // When both have moved on, rows idle for 10 steps go.
  for (int64_t step = 3; step < 30; ++step) {
    ASSERT_TRUE(PushRow(0, step, 5).ok());
  }
  ASSERT_TRUE(PushRow(1, 60002, 5).ok());
  EXPECT_GT(store_->SparseStats()[0].counters.evicted, 0);
}

}  // namespace
}  // namespace shardps
