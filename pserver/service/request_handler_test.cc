// The pserver's request handler without gRPC: every bad request gets its
// exact status code and changes no parameter; retried pushes, value
// encodings, sparse rows, and the checkpoint and rollback protocol.
#include "pserver/service/request_handler.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/shared_memory/shared_calls.h"
#include "common/testing/temp_dir.h"
#include "compression/threshold_codec.h"
#include "compression/value_encoding.h"
#include "gtest/gtest.h"
#include "pserver/server/call_table.h"
#include "pserver/testing/handler_testing.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

using testing::BytesToFloats;
using testing::FloatBytes;
using testing::KeyBytes;

class RequestHandlerTest : public ::testing::Test {
 protected:
  // Table "w": 6 values in blocks of 4 and 2, SGD with lr 0.5.
  JobSpec Job() {
    testing::JobOptions o;
    o.global_batch_size = 0;
    return testing::MakeJobSpec(
        SYNC, 2, {testing::DenseTableSpec("w", 6, 4, testing::Sgd(0.5f))}, o);
  }

  void InitJob() {
    InitJobRequest req;
    req.set_trainer_id(0);
    *req.mutable_job() = Job();
    for (uint32_t b = 0; b < 2; ++b) req.add_blocks()->set_block(b);
    InitJobResponse resp;
    ASSERT_TRUE(handler_->InitJob(req, &resp).ok());
    SetInitialValuesRequest vreq;
    vreq.set_trainer_id(0);
    DenseBlock* b0 = vreq.add_blocks();
    b0->set_block(0);
    b0->set_values(FloatBytes({1, 2, 3, 4}));
    DenseBlock* b1 = vreq.add_blocks();
    b1->set_block(1);
    b1->set_values(FloatBytes({5, 6}));
    SetInitialValuesResponse vresp;
    ASSERT_TRUE(handler_->SetInitialValues(vreq, &vresp).ok());
    CommitInitResponse cresp;
    ASSERT_TRUE(handler_->CommitInit(CommitInitRequest(), &cresp).ok());
  }

  absl::Status Push(int trainer, int64_t step, uint64_t request_id,
                    std::vector<std::pair<uint32_t, std::string>> blocks,
                    uint32_t table_id = 0, ValueEncoding encoding = FLOAT32) {
    PushRequest req;
    req.set_trainer_id(trainer);
    req.set_step(step);
    req.set_request_id(request_id);
    for (auto& [block, bytes] : blocks) {
      DenseBlock* b = req.add_blocks();
      b->set_table_id(table_id);
      b->set_block(block);
      b->set_encoding(encoding);
      b->set_values(bytes);
    }
    PushResponse resp;
    return handler_->Push(req, &resp);
  }

  absl::Status Pull(const PullRequest& req, PullResponse* resp) {
    return testing::PullAndWait(handler_.get(), req, resp);
  }
  // The call through the call table, as every binding makes it: a shared
  // region the request names reaches the handler as a lane.
  absl::Status Call(PsRpc rpc, const google::protobuf::Message& req,
                    google::protobuf::Message* resp) {
    SingleJobTarget target(handler_.get());
    absl::Notification done;
    absl::Status status;
    target.Call(rpc, CallContext{}, req, resp, [&](absl::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  }

  // Trainer `trainer`'s push of step 0 whose blocks 0 and 1 are at `at0`
  // and `at1` of the shared region `region_id`.
  absl::Status SharedPush(uint64_t request_id, uint64_t region_id, uint64_t at0,
                          uint64_t at1, int trainer) {
    PushRequest req;
    req.set_trainer_id(trainer);
    req.set_step(0);
    req.set_request_id(request_id);
    req.set_shared_region(region_id);
    DenseBlock* b0 = req.add_blocks();
    b0->set_block(0);
    b0->set_shared_offset(at0);
    DenseBlock* b1 = req.add_blocks();
    b1->set_block(1);
    b1->set_shared_offset(at1);
    PushResponse resp;
    return Call(PsRpc::kPush, req, &resp);
  }
  // Trainer 0's region of 112 bytes, opened and mapped, with the gradient
  // (2, 2, 2, 2 | 4, 4) at offset 64; its id into *id. Null on failure.
  std::unique_ptr<SharedRegion> OpenRegion(uint64_t* id) {
    SharedMemoryRequest req;
    req.set_trainer_id(0);
    req.set_bytes(112);
    SharedMemoryResponse resp;
    absl::Status s = handler_->shared_regions().Open(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return nullptr;
    auto region = SharedRegion::Attach(static_cast<pid_t>(resp.pid()),
                                       resp.fd(), resp.bytes(), resp.token());
    EXPECT_TRUE(region.ok()) << region.status();
    if (!region.ok()) return nullptr;
    const float g[6] = {2, 2, 2, 2, 4, 4};
    std::memcpy((*region)->data() + 64, g, sizeof(g));
    *id = resp.region_id();
    return *std::move(region);
  }
  // The same gradient (2, 2, 2, 2 | 4, 4) over TCP.
  absl::Status TcpPush(int trainer, uint64_t request_id) {
    PushRequest tcp;
    tcp.set_trainer_id(trainer);
    tcp.set_step(0);
    tcp.set_request_id(request_id);
    for (uint32_t b = 0; b < 2; ++b) {
      DenseBlock* d = tcp.add_blocks();
      d->set_block(b);
      d->set_values(b == 0 ? FloatBytes({2, 2, 2, 2}) : FloatBytes({4, 4}));
    }
    PushResponse resp;
    return handler_->Push(tcp, &resp);
  }
  // Step 0: trainer 0's push through region `region_id` (request 7) and
  // trainer 1's over TCP (request 8).
  void PushStepZero(uint64_t region_id) {
    ASSERT_TRUE(SharedPush(7, region_id, 64, 80, /*trainer=*/0).ok());
    ASSERT_TRUE(TcpPush(/*trainer=*/1, /*request_id=*/8).ok());
  }
  // A job at version 1: set up, a region of trainer 0's opened (into
  // *region, its id into *id) and step 0 pushed (PushStepZero).
  void SharedJobAtVersionOne(std::unique_ptr<SharedRegion>* region,
                             uint64_t* id) {
    InitJob();
    *region = OpenRegion(id);
    ASSERT_NE(*region, nullptr);
    ASSERT_NO_FATAL_FAILURE(PushStepZero(*id));
  }
  // Trainer 0's pull of version 1 into region `region_id`: block 0 at
  // offset 88, block 1 at 64.
  PullRequest SharedPull(uint64_t region_id) {
    PullRequest preq;
    preq.set_trainer_id(0);
    preq.set_min_version(1);
    preq.set_generation(store_.generation());
    preq.set_shared_region(region_id);
    BlockRef* r0 = preq.add_blocks();
    r0->set_block(0);
    r0->set_shared_offset(88);
    BlockRef* r1 = preq.add_blocks();
    r1->set_block(1);
    r1->set_shared_offset(64);
    return preq;
  }

  std::vector<float> PullAll(int64_t min_version = 0) {
    PullRequest req;
    req.set_trainer_id(0);
    req.set_incarnation(pull_incarnation_);
    req.set_min_version(min_version);
    req.set_generation(store_.generation());
    for (uint32_t b = 0; b < 2; ++b) req.add_blocks()->set_block(b);
    PullResponse resp;
    absl::Status s = Pull(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> out;
    for (const auto& b : resp.blocks()) {
      auto v = BytesToFloats(b.values());
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

  static void ExpectCode(const absl::Status& s, absl::StatusCode code,
                         const std::string& needle) {
    EXPECT_EQ(s.code(), code) << s << " (expected: " << needle << ")";
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  }

  ParameterStore store_{StoreOptions{}};
  uint64_t pull_incarnation_ = 0;  // PullAll's, as trainer 0
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<RequestHandler> handler_ =
      std::make_unique<RequestHandler>(&store_, nullptr);
  const std::vector<float> init_ = {1, 2, 3, 4, 5, 6};
};

TEST_F(RequestHandlerTest, BadRequests) {
  InitJob();
  const std::string g4 = FloatBytes({1, 1, 1, 1});
  ExpectCode(Push(0, 0, 1, {{0, g4}}, /*table_id=*/3),
             absl::StatusCode::kNotFound, "unknown table id 3");
  ExpectCode(Push(0, 0, 2, {{0, FloatBytes({1, 1, 1})}}),
             absl::StatusCode::kInvalidArgument, "gradient has 3 values");
  ExpectCode(Push(0, 0, 3, {{0, FloatBytes({1, 1, 1, 1, 1})}}),
             absl::StatusCode::kInvalidArgument, "gradient has 5 values");
  ExpectCode(Push(0, 0, 4, {{0, g4.substr(0, 15)}}),
             absl::StatusCode::kInvalidArgument, "not a whole number");
  ExpectCode(Push(0, 0, 5, {{0, FloatBytes({1, std::nanf(""), 1, 1})}}),
             absl::StatusCode::kInvalidArgument, "NaN");
  ExpectCode(
      Push(0, 0, 6,
           {{0, g4},
            {1, FloatBytes({std::numeric_limits<float>::infinity(), 0})}}),
      absl::StatusCode::kInvalidArgument, "Inf");
  ExpectCode(Push(5, 0, 7, {{0, g4}}), absl::StatusCode::kInvalidArgument,
             "trainer_id 5 is out of range");
  ExpectCode(Push(0, 3, 8, {{0, g4}}), absl::StatusCode::kFailedPrecondition,
             "still at step 0");
  ExpectCode(Push(0, 0, 0, {{0, g4}}), absl::StatusCode::kInvalidArgument,
             "without request_id");
  ExpectCode(Push(0, 0, 9, {{7, g4}}), absl::StatusCode::kNotFound,
             "block 7 is not held");
  ExpectCode(Push(0, 0, 10, {{0, g4}}, 0, static_cast<ValueEncoding>(17)),
             absl::StatusCode::kInvalidArgument, "unknown encoding");
  EXPECT_EQ(PullAll(), init_);
}

// Shared memory: values move through a region the trainer maps; the
// pserver bounds and checks everything the trainer names.
TEST_F(RequestHandlerTest, SharedMemoryOpenRefusesBadSizesAndTrainers) {
  SharedMemoryRequest oreq;
  oreq.set_trainer_id(0);
  oreq.set_bytes(64 + 48);
  SharedMemoryResponse oresp;
  ExpectCode(handler_->shared_regions().Open(oreq, &oresp),
             absl::StatusCode::kFailedPrecondition, "not initialized");
  InitJob();
  // At most a header and twice what the dense blocks take here.
  const uint64_t limit = 64 + 2 * store_.dense_bytes();
  oreq.set_bytes(limit + 1);
  ExpectCode(handler_->shared_regions().Open(oreq, &oresp),
             absl::StatusCode::kInvalidArgument,
             "65 to " + std::to_string(limit));
  oreq.set_bytes(64);
  ExpectCode(handler_->shared_regions().Open(oreq, &oresp),
             absl::StatusCode::kInvalidArgument, "bytes asked");
  oreq.set_bytes(112);
  oreq.set_trainer_id(2);
  ExpectCode(handler_->shared_regions().Open(oreq, &oresp),
             absl::StatusCode::kInvalidArgument, "trainer id 2 is not in");
}

TEST_F(RequestHandlerTest, SharedMemoryPushOutsideItsRegionIsRefused) {
  InitJob();
  uint64_t id = 0;
  std::unique_ptr<SharedRegion> region = OpenRegion(&id);
  ASSERT_NE(region, nullptr);
  char* base = region->data();
  const float g[6] = {2, 2, 2, 2, 4, 4};

  auto push = [&](uint64_t id, uint64_t region_id, uint64_t at0, uint64_t at1,
                  int trainer = 0) {
    return SharedPush(id, region_id, at0, at1, trainer);
  };
  ExpectCode(push(1, id + 1, 64, 80), absl::StatusCode::kNotFound,
             "shared region");
  ExpectCode(push(2, id, 64, 80, /*trainer=*/1), absl::StatusCode::kNotFound,
             "shared region");  // trainer 0's region
  ExpectCode(push(3, id, 66, 80), absl::StatusCode::kInvalidArgument,
             "not float32 values of the shared region");
  ExpectCode(push(4, id, 64, 108), absl::StatusCode::kInvalidArgument,
             "not float32 values of the shared region");  // 108 + 8 > 112
  ExpectCode(push(5, id, 0, 80), absl::StatusCode::kInvalidArgument,
             "not float32 values of the shared region");  // the header
  EXPECT_EQ(PullAll(), init_);                            // nothing applied
  std::memcpy(base + 80, g + 4, 8);
  float nan = std::nanf("");
  std::memcpy(base + 84, &nan, 4);
  ExpectCode(push(6, id, 64, 80), absl::StatusCode::kInvalidArgument, "NaN");
  std::memcpy(base + 80, g + 4, 8);
  ASSERT_TRUE(push(7, id, 64, 80).ok());
}

TEST_F(RequestHandlerTest, SharedMemoryPullWritesIntoTheRegion) {
  uint64_t id = 0;
  std::unique_ptr<SharedRegion> region;
  ASSERT_NO_FATAL_FAILURE(SharedJobAtVersionOne(&region, &id));
  char* base = region->data();

  // Pull into the region: values where asked, none in the reply.
  PullRequest preq = SharedPull(id);
  PullResponse presp;
  ASSERT_TRUE(Call(PsRpc::kPull, preq, &presp).ok());
  ASSERT_EQ(presp.blocks_size(), 2);
  for (const DenseBlock& b : presp.blocks()) EXPECT_TRUE(b.values().empty());
  float got[6];
  std::memcpy(got, base + 88, 16);
  std::memcpy(got + 4, base + 64, 8);
  // SGD lr 0.5 on the mean gradient (2, 2, 2, 2, 4, 4).
  EXPECT_EQ(std::vector<float>(got, got + 6),
            (std::vector<float>{0, 1, 2, 3, 3, 4}));
}

TEST_F(RequestHandlerTest, SharedMemoryPullOutsideItsRegionIsRefused) {
  uint64_t id = 0;
  std::unique_ptr<SharedRegion> region;
  ASSERT_NO_FATAL_FAILURE(SharedJobAtVersionOne(&region, &id));

  PullRequest preq = SharedPull(id);
  PullResponse presp;
  BlockRef* r0 = preq.mutable_blocks(0);
  r0->set_shared_offset(100);  // 100 + 16 > 112
  ExpectCode(Call(PsRpc::kPull, preq, &presp),
             absl::StatusCode::kInvalidArgument, "a shared pull block");
  r0->set_shared_offset(88);
  preq.set_encoding(FLOAT16);
  ExpectCode(Call(PsRpc::kPull, preq, &presp),
             absl::StatusCode::kInvalidArgument, "FLOAT32");
}

TEST_F(RequestHandlerTest, ANewSharedRegionReplacesTheOld) {
  uint64_t id = 0;
  std::unique_ptr<SharedRegion> region;
  ASSERT_NO_FATAL_FAILURE(SharedJobAtVersionOne(&region, &id));
  PullRequest preq = SharedPull(id);
  PullResponse presp;

  // A new region replaces the old: its id is refused from then on.
  uint64_t again = 0;
  ASSERT_NE(OpenRegion(&again), nullptr);
  EXPECT_NE(again, id);
  ExpectCode(Call(PsRpc::kPull, preq, &presp), absl::StatusCode::kNotFound,
             "shared region");
}

// The region a push names is checked after de-duplication: a retry of a
// push applied before the region was replaced gets its first answer, and
// a push refused for the old region is refused again under its id.
TEST_F(RequestHandlerTest, ALostRegionIsCheckedAfterDeduplication) {
  InitJob();
  uint64_t id = 0;
  std::unique_ptr<SharedRegion> region = OpenRegion(&id);
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(SharedPush(7, id, 64, 80, /*trainer=*/0).ok());
  uint64_t again = 0;
  ASSERT_NE(OpenRegion(&again), nullptr);
  EXPECT_TRUE(SharedPush(7, id, 64, 80, 0).ok());
  ExpectCode(SharedPush(9, id, 64, 80, 0), absl::StatusCode::kNotFound,
             "shared region");
  ExpectCode(SharedPush(9, again, 64, 80, 0), absl::StatusCode::kNotFound,
             "shared region");
  ASSERT_TRUE(TcpPush(/*trainer=*/1, /*request_id=*/8).ok());
  // Push 7 applied once (SGD lr 0.5 on the mean gradient).
  EXPECT_EQ(PullAll(1), (std::vector<float>{0, 1, 2, 3, 3, 4}));
}

// A region counts in --max_memory_mb while it is held, and no longer once
// replaced.
// A call area must fit whole: a client asking for one in a smaller region
// had the pserver's call loop read past the region's end (SIGBUS).
TEST_F(RequestHandlerTest, SharedMemoryCallAreaMustFitTheRegion) {
  InitJob();
  SharedMemoryRequest oreq;
  oreq.set_trainer_id(0);
  oreq.set_calls(true);
  SharedMemoryResponse oresp;
  for (uint64_t bytes : {uint64_t{65}, 64 + shared_calls::kAreaBytes - 1}) {
    oreq.set_bytes(bytes);
    ExpectCode(handler_->shared_regions().Open(oreq, &oresp),
               absl::StatusCode::kInvalidArgument,
               std::to_string(64 + shared_calls::kAreaBytes) + " to ");
  }
  oreq.set_bytes(64 + shared_calls::kAreaBytes + 48);
  EXPECT_TRUE(handler_->shared_regions().Open(oreq, &oresp).ok());
}

TEST(RequestHandlerBudgetTest, SharedRegionsCountInTheMemoryLimit) {
  StoreOptions so;
  so.max_memory_bytes = 6000;
  ParameterStore store(so);
  RequestHandler handler(&store, nullptr);
  InitJobRequest req;
  req.set_trainer_id(0);
  *req.mutable_job() = testing::MakeJobSpec(
      SYNC, 2, {testing::DenseTableSpec("w", 256, 256, testing::Sgd(0.5f))});
  req.add_blocks()->set_block(0);
  InitJobResponse resp;
  ASSERT_TRUE(handler.InitJob(req, &resp).ok());
  SetInitialValuesRequest vreq;
  vreq.set_trainer_id(0);
  DenseBlock* b = vreq.add_blocks();
  b->set_values(FloatBytes(std::vector<float>(256, 1.0f)));
  SetInitialValuesResponse vresp;
  ASSERT_TRUE(handler.SetInitialValues(vreq, &vresp).ok());
  CommitInitResponse cresp;
  ASSERT_TRUE(handler.CommitInit(CommitInitRequest(), &cresp).ok());
  const int64_t held = store.budget()->used();
  SharedMemoryRequest oreq;
  oreq.set_bytes(6000 - held + 4);  // 4 bytes too many
  SharedMemoryResponse oresp;
  ASSERT_LE(oreq.bytes(), 64 + 2 * static_cast<uint64_t>(store.dense_bytes()));
  EXPECT_EQ(handler.shared_regions().Open(oreq, &oresp).code(),
            absl::StatusCode::kResourceExhausted);
  oreq.set_bytes(6000 - held);
  ASSERT_TRUE(handler.shared_regions().Open(oreq, &oresp).ok());
  EXPECT_EQ(store.budget()->used(), 6000);
  oreq.set_trainer_id(1);
  oreq.set_bytes(128);
  EXPECT_EQ(handler.shared_regions().Open(oreq, &oresp).code(),
            absl::StatusCode::kResourceExhausted);
  oreq.set_trainer_id(0);  // replaces trainer 0's: its bytes are given back
  ASSERT_TRUE(handler.shared_regions().Open(oreq, &oresp).ok());
  EXPECT_EQ(store.budget()->used(), held + 128);
}

// Regions are bounded per pserver (--max_shared_regions): each costs a
// memfd, a mapping and, with calls, a thread, whatever its bytes.
TEST_F(RequestHandlerTest, SharedRegionsAreBoundedByTheQuota) {
  InitJob();
  auto quota = std::make_shared<RegionQuota>(1);
  handler_->shared_regions().set_quota(quota);
  SharedMemoryRequest oreq;
  oreq.set_trainer_id(0);
  oreq.set_bytes(112);
  SharedMemoryResponse oresp;
  ASSERT_TRUE(handler_->shared_regions().Open(oreq, &oresp).ok());
  EXPECT_EQ(quota->held(), 1);
  oreq.set_trainer_id(1);
  ExpectCode(handler_->shared_regions().Open(oreq, &oresp),
             absl::StatusCode::kResourceExhausted,
             "this pserver holds 1 regions (--max_shared_regions)");
  // A region given back (its trainer opens one over a replaced one) frees
  // its place; a refusal for memory takes none.
  oreq.set_trainer_id(0);
  ASSERT_TRUE(handler_->shared_regions().Open(oreq, &oresp).ok());
  EXPECT_EQ(quota->held(), 1);
  auto none = std::make_shared<RegionQuota>(0);
  handler_->shared_regions().set_quota(none);
  oreq.set_trainer_id(1);
  ExpectCode(handler_->shared_regions().Open(oreq, &oresp),
             absl::StatusCode::kResourceExhausted, "--max_shared_regions");
  EXPECT_EQ(none->held(), 0);
}

TEST_F(RequestHandlerTest, PushForAppliedStepIsRefused) {
  InitJob();
  ASSERT_TRUE(Push(0, 0, 11, {{0, FloatBytes({2, 2, 2, 2})}}).ok());
  ASSERT_TRUE(Push(1, 0, 12, {{0, FloatBytes({2, 2, 2, 2})}}).ok());
  const auto after = PullAll();
  ExpectCode(Push(1, 0, 13, {{0, FloatBytes({2, 2, 2, 2})}}),
             absl::StatusCode::kFailedPrecondition, "already applied");
  EXPECT_EQ(PullAll(), after);
}

TEST_F(RequestHandlerTest, RetriedPushIsAppliedOnceAndAnsweredOk) {
  InitJob();
  ASSERT_TRUE(Push(0, 0, 21, {{0, FloatBytes({2, 2, 2, 2})}}).ok());
  ASSERT_TRUE(Push(1, 0, 22, {{0, FloatBytes({2, 2, 2, 2})}}).ok());
  // The step is applied; a retry of trainer 1's push (same id) is OK and
  // changes nothing.
  const auto after = PullAll();
  EXPECT_EQ(after, (std::vector<float>{0, 1, 2, 3, 5, 6}));
  EXPECT_TRUE(Push(1, 0, 22, {{0, FloatBytes({2, 2, 2, 2})}}).ok());
  EXPECT_EQ(PullAll(), after);
  // A refused push is answered the same way again.
  ExpectCode(Push(1, 0, 23, {{0, FloatBytes({2, 2, 2, 2})}}),
             absl::StatusCode::kFailedPrecondition, "already applied");
  ExpectCode(Push(1, 0, 23, {{0, FloatBytes({2, 2, 2, 2})}}),
             absl::StatusCode::kFailedPrecondition, "already applied");
}

TEST_F(RequestHandlerTest, BeforeInitAndWrongChief) {
  ExpectCode(Push(0, 0, 31, {{0, FloatBytes({1, 1, 1, 1})}}),
             absl::StatusCode::kFailedPrecondition, "not initialised");
  InitJobRequest req;
  req.set_trainer_id(1);
  *req.mutable_job() = Job();
  InitJobResponse resp;
  ExpectCode(handler_->InitJob(req, &resp), absl::StatusCode::kPermissionDenied,
             "only the chief");
  InitJob();
  // Same spec again: a no-op reporting the job ready; another spec: refused.
  req.set_trainer_id(0);
  ASSERT_TRUE(handler_->InitJob(req, &resp).ok());
  EXPECT_TRUE(resp.already_ready());
  req.mutable_job()->set_mode(ASYNC);
  ExpectCode(handler_->InitJob(req, &resp),
             absl::StatusCode::kFailedPrecondition, "different spec");
  EXPECT_EQ(PullAll(), init_);
}

TEST_F(RequestHandlerTest, InitJobKeepsThePserversPlaceInTheJob) {
  InitJobRequest req;
  req.set_trainer_id(0);
  *req.mutable_job() = Job();
  InitJobResponse resp;
  for (auto [index, count] : {std::pair{0, -1}, {2, 2}, {-1, 2}, {0, 1025}}) {
    req.set_server_index(index);
    req.set_num_servers(count);
    ExpectCode(handler_->InitJob(req, &resp),
               absl::StatusCode::kInvalidArgument, "InitJob: pserver");
  }
  InitJob();  // from a trainer that says nothing of the placement
  req.set_server_index(1);
  req.set_num_servers(2);
  ASSERT_TRUE(handler_->InitJob(req, &resp).ok());
  EXPECT_TRUE(resp.already_ready());
  // Another chief placing it elsewhere (another --pservers order or count)
  // would send it other blocks and keys.
  req.set_server_index(0);
  ExpectCode(handler_->InitJob(req, &resp),
             absl::StatusCode::kFailedPrecondition,
             "holds shard 1 of 2 of the job, and the chief places it as "
             "pserver 0 of 2");
  req.set_server_index(1);
  req.set_num_servers(3);
  ExpectCode(handler_->InitJob(req, &resp),
             absl::StatusCode::kFailedPrecondition, "reshard");
}

TEST_F(RequestHandlerTest, StatusAndRegistration) {
  GetStatusResponse resp;
  ASSERT_TRUE(handler_->GetStatus(GetStatusRequest(), &resp).ok());
  EXPECT_FALSE(resp.job_ready());
  EXPECT_FALSE(resp.checkpoints_enabled());
  InitJob();
  ASSERT_TRUE(handler_->GetStatus(GetStatusRequest(), &resp).ok());
  EXPECT_TRUE(resp.job_ready());
  EXPECT_EQ(resp.job().tables(0).name(), "w");
  EXPECT_EQ(resp.live_trainers_size(), 2);

  RegisterRequest reg;
  RegisterResponse rresp;
  reg.set_trainer_id(-1);
  ExpectCode(handler_->Register(reg, &rresp, "test"),
             absl::StatusCode::kInvalidArgument, "negative trainer_id");
  reg.set_trainer_id(2);
  ExpectCode(handler_->Register(reg, &rresp, "test"),
             absl::StatusCode::kInvalidArgument, "out of range");
  reg.set_trainer_id(1);
  ExpectCode(handler_->Register(reg, &rresp, "test"),
             absl::StatusCode::kInvalidArgument, "without an incarnation");
  reg.set_incarnation(7);
  ASSERT_TRUE(handler_->Register(reg, &rresp, "test").ok());
  EXPECT_TRUE(rresp.job_ready());
  EXPECT_EQ(rresp.join_step(), 0);
  // Finding: "incarnation 0 skips the incarnation check": a push or pull
  // for trainer 1 without its incarnation is refused, as another one is.
  for (uint64_t incarnation : {0, 8}) {
    PushRequest push;
    push.set_trainer_id(1);
    push.set_incarnation(incarnation);
    push.set_request_id(99 + incarnation);
    PushResponse presp;
    ExpectCode(handler_->Push(push, &presp),
               absl::StatusCode::kFailedPrecondition,
               incarnation == 0 ? "without an incarnation is refused"
                                : "was replaced by incarnation 7");
  }
  PullRequest pull;
  pull.set_trainer_id(1);
  PullResponse presp;
  ExpectCode(Pull(pull, &presp), absl::StatusCode::kFailedPrecondition,
             "without an incarnation is refused");
}

TEST_F(RequestHandlerTest, SparseRows) {
  // A job with the dense table "w" and a sparse table "e" of dim 2.
  InitJobRequest req;
  req.set_trainer_id(0);
  JobSpec job = Job();
  job.set_num_trainers(1);
  *job.add_tables() = testing::SparseTableSpec("e", 2, testing::Sgd(1.0f));
  *req.mutable_job() = job;
  InitJobResponse iresp;
  ASSERT_TRUE(handler_->InitJob(req, &iresp).ok());
  CommitInitResponse cresp;
  ASSERT_TRUE(handler_->CommitInit(CommitInitRequest(), &cresp).ok());

  auto push = [&](uint64_t id, std::string keys, std::string values,
                  bool with_dense = false) {
    PushRequest p;
    p.set_trainer_id(0);
    p.set_step(0);
    p.set_request_id(id);
    SparseRows* r = p.add_sparse();
    r->set_table_id(1);
    r->set_keys(keys);
    r->set_values(values);
    r->set_num_chunks(1);
    if (with_dense) p.add_blocks()->set_values(FloatBytes({1, 1, 1, 1}));
    PushResponse presp;
    return handler_->Push(p, &presp);
  };
  ExpectCode(push(1, KeyBytes({3}).substr(0, 7), FloatBytes({1, 1})),
             absl::StatusCode::kInvalidArgument, "whole number of uint64");
  ExpectCode(push(2, KeyBytes({3}), FloatBytes({1, 1}), /*with_dense=*/true),
             absl::StatusCode::kInvalidArgument, "one kind only");
  ASSERT_TRUE(push(3, KeyBytes({3, 4}), FloatBytes({1, 2, 3, 4})).ok());

  PullRequest preq;
  preq.set_trainer_id(0);
  preq.set_min_version(1);
  SparseRows* want = preq.add_sparse();
  want->set_table_id(1);
  want->set_keys(KeyBytes({4, 3, 5}));
  PullResponse presp;
  ASSERT_TRUE(Pull(preq, &presp).ok());
  ASSERT_EQ(presp.sparse_size(), 1);
  EXPECT_EQ(BytesToFloats(presp.sparse(0).values()),
            (std::vector<float>{-3, -4, -1, -2, 0, 0}));
  // A dense table asked for as sparse is refused.
  want->set_table_id(0);
  ExpectCode(Pull(preq, &presp), absl::StatusCode::kInvalidArgument,
             "is dense");
}

TEST_F(RequestHandlerTest, HalfPrecisionPushAndPull) {
  InitJob();
  // Trainer 0 pushes float16, trainer 1 bfloat16; both exact here.
  for (int k = 0; k < 2; ++k) {
    const ValueEncoding e = k == 0 ? FLOAT16 : BFLOAT16;
    std::string bytes;
    EncodeValues(std::vector<float>{2, 2, 2, 2}, e, &bytes);
    ASSERT_TRUE(Push(k, 0, 100 + k, {{0, bytes}}, 0, e).ok());
  }
  PullRequest req;
  req.set_trainer_id(0);
  req.set_min_version(1);
  req.set_encoding(FLOAT16);
  req.add_blocks()->set_block(0);
  PullResponse resp;
  ASSERT_TRUE(Pull(req, &resp).ok());
  ASSERT_EQ(resp.blocks(0).encoding(), FLOAT16);
  ASSERT_EQ(resp.blocks(0).values().size(), 8u);  // half the bytes
  std::vector<float> v(4);
  ASSERT_TRUE(
      DecodeValues(resp.blocks(0).values(), FLOAT16, absl::MakeSpan(v)).ok());
  EXPECT_EQ(v, (std::vector<float>{0, 1, 2, 3}));  // 1..4 - 0.5 * 2

  // An odd byte count and an unknown pull encoding are refused.
  ExpectCode(Push(0, 1, 200, {{0, std::string(7, '\0')}}, 0, FLOAT16),
             absl::StatusCode::kInvalidArgument, "16-bit");
  req.set_encoding(static_cast<ValueEncoding>(99));
  ExpectCode(Pull(req, &resp), absl::StatusCode::kInvalidArgument,
             "pull encoding");

  // A compressed pull: dense the first time (FLOAT32, with the shadow's
  // epoch), then the change since the version held (none here).
  req.set_encoding(THRESHOLD);
  resp.Clear();
  ASSERT_TRUE(Pull(req, &resp).ok());
  ASSERT_EQ(resp.blocks(0).encoding(), FLOAT32);
  ASSERT_EQ(resp.blocks(0).values().size(), 16u);
  const uint64_t epoch = resp.blocks(0).delta_epoch();
  ASSERT_NE(epoch, 0u);
  req.mutable_blocks(0)->set_held_epoch(epoch);
  req.mutable_blocks(0)->set_held_version(resp.blocks(0).version());
  resp.Clear();
  ASSERT_TRUE(Pull(req, &resp).ok());
  EXPECT_EQ(resp.blocks(0).encoding(), THRESHOLD);
  EXPECT_EQ(resp.blocks(0).delta_epoch(), epoch);
  EXPECT_TRUE(resp.blocks(0).values().empty());
}

TEST_F(RequestHandlerTest, ThresholdMessagesAreDecodedOrRefusedWhole) {
  InitJob();
  // Trainer 0: a threshold message of residual {2, 0, -2, 0} at t = 1.
  std::vector<float> residual = {2, 0, -2, 0};
  std::vector<int32_t> msg;
  ASSERT_TRUE(
      EncodeThresholdOrBitmap(absl::MakeSpan(residual), 1.0f, &msg).ok());
  std::string bytes;
  AppendMessageBytes(msg, &bytes);
  // A message whose header names another length is refused whole.
  std::vector<float> other(6, 3.0f);
  std::vector<int32_t> bad;
  ASSERT_TRUE(EncodeThresholdOrBitmap(absl::MakeSpan(other), 1.0f, &bad).ok());
  std::string bad_bytes;
  AppendMessageBytes(bad, &bad_bytes);
  ExpectCode(Push(0, 0, 300, {{0, bad_bytes}}, 0, THRESHOLD),
             absl::StatusCode::kInvalidArgument, "block 0");
  // A block that is not held: refused before decoding, as a float32 one.
  ExpectCode(Push(0, 0, 299, {{5, bytes}}, 0, THRESHOLD),
             absl::StatusCode::kNotFound, "block 5 is not held");
  ASSERT_TRUE(Push(0, 0, 301, {{0, bytes}}, 0, THRESHOLD).ok());
  // Trainer 1: an empty message, a zero gradient.
  ASSERT_TRUE(Push(1, 0, 302, {{0, ""}}, 0, THRESHOLD).ok());
  // Mean of {1, 0, -1, 0} and 0, times lr 0.5.
  EXPECT_EQ(PullAll(1 - 1), (std::vector<float>{0.75f, 2, 3.25f, 4, 5, 6}));
}

TEST_F(RequestHandlerTest, CheckpointAndRollbackNeedACheckpointDir) {
  InitJob();
  CheckpointRequest c;
  CheckpointResponse cr;
  ExpectCode(handler_->Checkpoint(c, &cr),
             absl::StatusCode::kFailedPrecondition, "without --checkpoint_dir");
  RollbackRequest r;
  RollbackResponse rr;
  ExpectCode(handler_->Rollback(r, &rr), absl::StatusCode::kFailedPrecondition,
             "without --checkpoint_dir");
}

// A job with checkpoints in `tmp`, and that of step 0 written.
class CheckpointProtocolTest : public RequestHandlerTest {
 protected:
  void SetUp() override {
    checkpointer_ =
        std::make_unique<Checkpointer>(Env::Default(), tmp_.Path("ckpt"), 3);
    handler_ = std::make_unique<RequestHandler>(&store_, checkpointer_.get());
    InitJob();
  }
  // Checkpoints of steps 0 and 1 (a step of gradient 2 everywhere).
  void CheckpointSteps0And1() {
    CheckpointRequest c;
    CheckpointResponse cr;
    c.set_trainer_id(0);
    ASSERT_TRUE(handler_->Checkpoint(c, &cr).ok());  // step 0
    ASSERT_TRUE(Push(0, 0, 1, {{0, FloatBytes({2, 2, 2, 2})}}).ok());
    ASSERT_TRUE(Push(1, 0, 2, {{0, FloatBytes({2, 2, 2, 2})}}).ok());
    ASSERT_TRUE(Push(0, 0, 3, {{1, FloatBytes({2, 2})}}).ok());
    ASSERT_TRUE(Push(1, 0, 4, {{1, FloatBytes({2, 2})}}).ok());
    c.set_step(1);
    ASSERT_TRUE(handler_->Checkpoint(c, &cr).ok());
    ASSERT_TRUE(checkpointer_->Flush().ok());
  }
  testing::ScopedTempDir tmp_{"request_handler_test"};
};

TEST_F(CheckpointProtocolTest, Checkpoints) {
  CheckpointRequest c;
  CheckpointResponse cr;
  c.set_trainer_id(1);
  ExpectCode(handler_->Checkpoint(c, &cr), absl::StatusCode::kPermissionDenied,
             "only the chief");
  c.set_trainer_id(0);
  c.set_step(-1);
  ExpectCode(handler_->Checkpoint(c, &cr), absl::StatusCode::kInvalidArgument,
             "out of range");
  c.set_step(0);
  c.set_generation(4);
  ExpectCode(handler_->Checkpoint(c, &cr), absl::StatusCode::kAborted,
             "generation 4");
  CheckpointSteps0And1();
  GetStatusResponse status;
  ASSERT_TRUE(handler_->GetStatus(GetStatusRequest(), &status).ok());
  EXPECT_TRUE(status.checkpoints_enabled());
  EXPECT_EQ(status.checkpoint_steps_size(), 2);
}

TEST_F(CheckpointProtocolTest, AnotherTrainerWakesTheChief) {
  CheckpointSteps0And1();
  RollbackRequest r;
  RollbackResponse rr;
  r.set_step(0);
  r.set_generation(1);
  // Finding: "Rollback from any trainer id" (the audit's 4242): only a
  // trainer of the job rolls it back.
  for (int k : {2, 4242, -1}) {
    r.set_trainer_id(k);
    ExpectCode(handler_->Rollback(r, &rr), absl::StatusCode::kInvalidArgument,
               "the job has 2 trainers");
  }
  EXPECT_EQ(store_.generation(), 0u);
  // Another trainer rolls nothing back: it wakes the chief, whose pull
  // waiting here (for version 2) is answered ABORTED.
  PullRequest waiting;
  waiting.set_trainer_id(0);
  waiting.set_min_version(2);
  waiting.add_blocks()->set_block(0);
  PullResponse waiting_resp;
  absl::Notification woken;
  absl::Status pull_status;
  handler_->Pull(waiting, &waiting_resp, [&](absl::Status st) {
    pull_status = std::move(st);
    woken.Notify();
  });
  ASSERT_TRUE(store_.state()->waiters.WaitForSize(1, absl::Seconds(10)));
  r.set_trainer_id(1);
  ASSERT_TRUE(handler_->Rollback(r, &rr).ok());
  ASSERT_TRUE(woken.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ExpectCode(pull_status, absl::StatusCode::kAborted,
             "trainer 1 found the pservers disagreeing and asks the chief to "
             "roll the job back to step 0");
  EXPECT_EQ(store_.generation(), 0u);
  EXPECT_EQ(PullAll(1), (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST_F(CheckpointProtocolTest, TheChiefsIncarnationRollsBack) {
  CheckpointSteps0And1();
  RollbackRequest r;
  RollbackResponse rr;
  r.set_step(0);
  r.set_generation(1);
  // Finding: "only the chief's incarnation may roll back": trainer 0's
  // requests carry its running incarnation.
  RegisterRequest reg;
  RegisterResponse rresp;
  reg.set_trainer_id(0);
  reg.set_incarnation(5);
  ASSERT_TRUE(handler_->Register(reg, &rresp, "test").ok());
  pull_incarnation_ = 5;
  r.set_trainer_id(0);
  for (uint64_t incarnation : {0, 6}) {
    r.set_incarnation(incarnation);
    ExpectCode(handler_->Rollback(r, &rr),
               absl::StatusCode::kFailedPrecondition, "trainer 0");
  }
  EXPECT_EQ(store_.generation(), 0u);
  // Back to step 0 as generation 1: values and versions of step 0, and the
  // checkpoint of step 1 is gone with the abandoned timeline.
  r.set_incarnation(5);
  ASSERT_TRUE(handler_->Rollback(r, &rr).ok());
  EXPECT_EQ(store_.generation(), 1u);
  EXPECT_EQ(store_.base_step(), 0);
  EXPECT_EQ(PullAll(), init_);
  GetStatusResponse after;
  ASSERT_TRUE(handler_->GetStatus(GetStatusRequest(), &after).ok());
  EXPECT_EQ(after.checkpoint_steps_size(), 1);
  // The same rollback again (the chief asked twice): done already.
  ASSERT_TRUE(handler_->Rollback(r, &rr).ok());
  // An older or equal generation: refused.
  r.set_step(1);
  ExpectCode(handler_->Rollback(r, &rr), absl::StatusCode::kAborted, "already");
  // A step without a checkpoint.
  r.set_step(7);
  r.set_generation(2);
  ExpectCode(handler_->Rollback(r, &rr), absl::StatusCode::kFailedPrecondition,
             "rollback to step 7");
  EXPECT_EQ(store_.generation(), 1u);
  // Finding: "a rollback to generation 2^64-1 makes every later recovery
  // fail".
  r.set_step(0);
  r.set_generation(UINT64_MAX);
  ExpectCode(handler_->Rollback(r, &rr), absl::StatusCode::kInvalidArgument,
             "moves it by at most 65536");
  EXPECT_EQ(store_.generation(), 1u);
  // Finding: "Rollback from any client deletes every checkpoint newer than
  // the step it names": the abandoned step 1 was set aside, not deleted.
  EXPECT_TRUE(Env::Default()
                  ->FileExists(tmp_.Path("ckpt/" + CheckpointDirName(1)) +
                               ".abandoned-g1")
                  .ok());
}

}  // namespace
}  // namespace shardps
