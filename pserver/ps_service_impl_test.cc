// The pserver's gRPC service, in process: every bad request gets its exact
// status code over the wire and changes no parameter.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compression/threshold_codec.h"
#include "compression/value_encoding.h"
#include "gtest/gtest.h"
#include "proto/ps_service.grpc.pb.h"
#include "pserver/server.h"

namespace shardps {
namespace {

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

std::vector<float> Floats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

class PsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PsServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    server_ = std::move(*PsServer::Create(o));
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_GT(server_->port(), 0);
    stub_ = ParameterServer::NewStub(server_->InProcessChannel());
  }

  JobSpec Job() {
    JobSpec job;
    job.set_mode(SYNC);
    job.set_num_trainers(2);
    job.set_max_staleness(-1);
    TableSpec* t = job.add_tables();
    t->set_name("w");
    t->add_shape(6);
    t->set_block_size(4);
    t->mutable_optimizer()->set_type(OptimizerConfig::SGD);
    t->mutable_optimizer()->set_learning_rate(0.5f);
    return job;
  }

  void InitJob() {
    InitJobRequest req;
    req.set_trainer_id(0);
    *req.mutable_job() = Job();
    for (uint32_t b = 0; b < 2; ++b) {
      BlockRef* r = req.add_blocks();
      r->set_block(b);
    }
    InitJobResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->InitJob(&ctx, req, &resp).ok());
    SetInitialValuesRequest vreq;
    vreq.set_trainer_id(0);
    DenseBlock* b0 = vreq.add_blocks();
    b0->set_block(0);
    b0->set_values(Bytes({1, 2, 3, 4}));
    DenseBlock* b1 = vreq.add_blocks();
    b1->set_block(1);
    b1->set_values(Bytes({5, 6}));
    SetInitialValuesResponse vresp;
    grpc::ClientContext ctx2;
    ASSERT_TRUE(stub_->SetInitialValues(&ctx2, vreq, &vresp).ok());
    CommitInitRequest creq;
    CommitInitResponse cresp;
    grpc::ClientContext ctx3;
    ASSERT_TRUE(stub_->CommitInit(&ctx3, creq, &cresp).ok());
  }

  grpc::Status Push(int trainer, int64_t step, uint64_t request_id,
                    std::vector<std::pair<uint32_t, std::string>> blocks,
                    uint32_t table_id = 0) {
    PushRequest req;
    req.set_trainer_id(trainer);
    req.set_step(step);
    req.set_request_id(request_id);
    for (auto& [block, bytes] : blocks) {
      DenseBlock* b = req.add_blocks();
      b->set_table_id(table_id);
      b->set_block(block);
      b->set_values(bytes);
    }
    PushResponse resp;
    grpc::ClientContext ctx;
    return stub_->Push(&ctx, req, &resp);
  }

  std::vector<float> PullAll(int64_t min_version = 0) {
    PullRequest req;
    req.set_trainer_id(0);
    req.set_min_version(min_version);
    for (uint32_t b = 0; b < 2; ++b) req.add_blocks()->set_block(b);
    PullResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Pull(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<float> out;
    for (const auto& b : resp.blocks()) {
      auto v = Floats(b.values());
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

  void ExpectCode(const grpc::Status& s, grpc::StatusCode code,
                  const std::string& needle) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(needle), std::string::npos)
        << s.error_message();
  }

  std::unique_ptr<PsServer> server_;
  std::unique_ptr<ParameterServer::Stub> stub_;
  const std::vector<float> init_ = {1, 2, 3, 4, 5, 6};
};

TEST_F(PsServiceTest, BadRequestsOverTheWire) {
  InitJob();
  const std::string g4 = Bytes({1, 1, 1, 1});
  ExpectCode(Push(0, 0, 1, {{0, g4}}, /*table_id=*/3),
             grpc::StatusCode::NOT_FOUND, "unknown table id 3");
  ExpectCode(Push(0, 0, 2, {{0, Bytes({1, 1, 1})}}),
             grpc::StatusCode::INVALID_ARGUMENT, "gradient has 3 values");
  ExpectCode(Push(0, 0, 3, {{0, Bytes({1, 1, 1, 1, 1})}}),
             grpc::StatusCode::INVALID_ARGUMENT, "gradient has 5 values");
  ExpectCode(Push(0, 0, 4, {{0, g4.substr(0, 15)}}),
             grpc::StatusCode::INVALID_ARGUMENT, "not a whole number");
  ExpectCode(Push(0, 0, 5, {{0, Bytes({1, std::nanf(""), 1, 1})}}),
             grpc::StatusCode::INVALID_ARGUMENT, "NaN");
  ExpectCode(
      Push(0, 0, 6,
           {{0, g4}, {1, Bytes({std::numeric_limits<float>::infinity(), 0})}}),
      grpc::StatusCode::INVALID_ARGUMENT, "Inf");
  ExpectCode(Push(5, 0, 7, {{0, g4}}), grpc::StatusCode::INVALID_ARGUMENT,
             "trainer_id 5 is out of range");
  ExpectCode(Push(0, 3, 8, {{0, g4}}), grpc::StatusCode::FAILED_PRECONDITION,
             "still at step 0");
  ExpectCode(Push(0, 0, 0, {{0, g4}}), grpc::StatusCode::INVALID_ARGUMENT,
             "without request_id");
  ExpectCode(Push(0, 0, 9, {{7, g4}}), grpc::StatusCode::NOT_FOUND,
             "block 7 is not held");
  EXPECT_EQ(PullAll(), init_);
}

TEST_F(PsServiceTest, PushForAppliedStepIsRefused) {
  InitJob();
  ASSERT_TRUE(Push(0, 0, 11, {{0, Bytes({2, 2, 2, 2})}}).ok());
  ASSERT_TRUE(Push(1, 0, 12, {{0, Bytes({2, 2, 2, 2})}}).ok());
  const auto after = PullAll();
  ExpectCode(Push(1, 0, 13, {{0, Bytes({2, 2, 2, 2})}}),
             grpc::StatusCode::FAILED_PRECONDITION, "already applied");
  EXPECT_EQ(PullAll(), after);
}

TEST_F(PsServiceTest, RetriedPushIsAppliedOnceAndAnsweredOk) {
  InitJob();
  ASSERT_TRUE(Push(0, 0, 21, {{0, Bytes({2, 2, 2, 2})}}).ok());
  ASSERT_TRUE(Push(1, 0, 22, {{0, Bytes({2, 2, 2, 2})}}).ok());
  // The step is applied; a retry of trainer 1's push (same id) is OK and
  // changes nothing.
  const auto after = PullAll();
  EXPECT_EQ(after, (std::vector<float>{0, 1, 2, 3, 5, 6}));
  EXPECT_TRUE(Push(1, 0, 22, {{0, Bytes({2, 2, 2, 2})}}).ok());
  EXPECT_EQ(PullAll(), after);
}

TEST_F(PsServiceTest, BeforeInitAndWrongChief) {
  ExpectCode(Push(0, 0, 31, {{0, Bytes({1, 1, 1, 1})}}),
             grpc::StatusCode::FAILED_PRECONDITION, "not initialised");
  InitJobRequest req;
  req.set_trainer_id(1);
  *req.mutable_job() = Job();
  InitJobResponse resp;
  grpc::ClientContext ctx;
  ExpectCode(stub_->InitJob(&ctx, req, &resp),
             grpc::StatusCode::PERMISSION_DENIED, "only the chief");
  InitJob();
  // Same spec again: a no-op reporting the job ready; another spec: refused.
  req.set_trainer_id(0);
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub_->InitJob(&ctx2, req, &resp).ok());
  EXPECT_TRUE(resp.already_ready());
  req.mutable_job()->set_mode(ASYNC);
  grpc::ClientContext ctx3;
  ExpectCode(stub_->InitJob(&ctx3, req, &resp),
             grpc::StatusCode::FAILED_PRECONDITION, "different spec");
  EXPECT_EQ(PullAll(), init_);
}

TEST_F(PsServiceTest, StatusAndHealth) {
  GetStatusRequest req;
  GetStatusResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetStatus(&ctx, req, &resp).ok());
  EXPECT_FALSE(resp.job_ready());
  InitJob();
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub_->GetStatus(&ctx2, req, &resp).ok());
  EXPECT_TRUE(resp.job_ready());
  EXPECT_EQ(resp.job().tables(0).name(), "w");
}

TEST_F(PsServiceTest, ShutdownAnswersWaitingPullUnavailable) {
  InitJob();
  PullRequest req;
  req.set_trainer_id(0);
  req.set_min_version(1);
  req.add_blocks()->set_block(0);
  PullResponse resp;
  grpc::ClientContext ctx;
  grpc::Status result;
  std::thread t([&] { result = stub_->Pull(&ctx, req, &resp); });
  absl::SleepFor(absl::Milliseconds(200));
  server_->Shutdown(absl::Seconds(1));
  t.join();
  EXPECT_EQ(result.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.error_message();
}

TEST_F(PsServiceTest, SparseRowsOverTheWire) {
  // A job with the dense table "w" and a sparse table "e" of dim 2.
  InitJobRequest req;
  req.set_trainer_id(0);
  JobSpec job = Job();
  job.set_num_trainers(1);
  TableSpec* e = job.add_tables();
  e->set_name("e");
  e->set_kind(TableSpec::SPARSE);
  e->mutable_sparse()->set_dim(2);
  e->mutable_optimizer()->set_type(OptimizerConfig::SGD);
  e->mutable_optimizer()->set_learning_rate(1.0f);
  *req.mutable_job() = job;
  InitJobResponse iresp;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub_->InitJob(&c1, req, &iresp).ok());
  grpc::ClientContext c2;
  CommitInitRequest creq;
  CommitInitResponse cresp;
  ASSERT_TRUE(stub_->CommitInit(&c2, creq, &cresp).ok());

  auto keys_bytes = [](std::vector<uint64_t> k) {
    return std::string(reinterpret_cast<const char*>(k.data()),
                       k.size() * sizeof(uint64_t));
  };
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
    if (with_dense) p.add_blocks()->set_values(Bytes({1, 1, 1, 1}));
    PushResponse presp;
    grpc::ClientContext ctx;
    return stub_->Push(&ctx, p, &presp);
  };
  ExpectCode(push(1, keys_bytes({3}).substr(0, 7), Bytes({1, 1})),
             grpc::StatusCode::INVALID_ARGUMENT, "whole number of uint64");
  ExpectCode(push(2, keys_bytes({3}), Bytes({1, 1}), /*with_dense=*/true),
             grpc::StatusCode::INVALID_ARGUMENT, "not both");
  ASSERT_TRUE(push(3, keys_bytes({3, 4}), Bytes({1, 2, 3, 4})).ok());

  PullRequest preq;
  preq.set_trainer_id(0);
  preq.set_min_version(1);
  SparseRows* want = preq.add_sparse();
  want->set_table_id(1);
  want->set_keys(keys_bytes({4, 3, 5}));
  PullResponse presp;
  grpc::ClientContext c3;
  ASSERT_TRUE(stub_->Pull(&c3, preq, &presp).ok());
  ASSERT_EQ(presp.sparse_size(), 1);
  EXPECT_EQ(Floats(presp.sparse(0).values()),
            (std::vector<float>{-3, -4, -1, -2, 0, 0}));
  // A dense table asked for as sparse is refused.
  want->set_table_id(0);
  grpc::ClientContext c4;
  ExpectCode(stub_->Pull(&c4, preq, &presp), grpc::StatusCode::INVALID_ARGUMENT,
             "is dense");
}

TEST_F(PsServiceTest, HalfPrecisionPushAndPull) {
  InitJob();
  // Trainer 0 pushes float16, trainer 1 bfloat16; both exact here.
  for (int k = 0; k < 2; ++k) {
    PushRequest p;
    p.set_trainer_id(k);
    p.set_step(0);
    p.set_request_id(100 + k);
    DenseBlock* b = p.add_blocks();
    b->set_block(0);
    b->set_encoding(k == 0 ? FLOAT16 : BFLOAT16);
    EncodeValues(std::vector<float>{2, 2, 2, 2}, b->encoding(),
                 b->mutable_values());
    PushResponse r;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Push(&ctx, p, &r).ok());
  }
  PullRequest req;
  req.set_trainer_id(0);
  req.set_min_version(1);
  req.set_encoding(FLOAT16);
  req.add_blocks()->set_block(0);
  PullResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Pull(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.blocks(0).encoding(), FLOAT16);
  ASSERT_EQ(resp.blocks(0).values().size(), 8u);  // half the bytes
  std::vector<float> v(4);
  ASSERT_TRUE(
      DecodeValues(resp.blocks(0).values(), FLOAT16, absl::MakeSpan(v)).ok());
  EXPECT_EQ(v, (std::vector<float>{0, 1, 2, 3}));  // 1..4 - 0.5 * 2

  // An odd byte count and a pull encoding that is not plain are refused.
  PushRequest bad;
  bad.set_trainer_id(0);
  bad.set_step(1);
  bad.set_request_id(200);
  DenseBlock* b = bad.add_blocks();
  b->set_block(0);
  b->set_encoding(FLOAT16);
  b->set_values(std::string(7, '\0'));
  PushResponse r;
  grpc::ClientContext c2;
  ExpectCode(stub_->Push(&c2, bad, &r), grpc::StatusCode::INVALID_ARGUMENT,
             "16-bit");
  req.set_encoding(THRESHOLD);
  grpc::ClientContext c3;
  ExpectCode(stub_->Pull(&c3, req, &resp), grpc::StatusCode::INVALID_ARGUMENT,
             "pull encoding");
}

TEST_F(PsServiceTest, ThresholdMessagesAreDecodedOrRefusedWhole) {
  InitJob();
  auto push = [&](int trainer, uint64_t id, uint32_t block,
                  const std::string& bytes) {
    PushRequest p;
    p.set_trainer_id(trainer);
    p.set_step(0);
    p.set_request_id(id);
    DenseBlock* b = p.add_blocks();
    b->set_block(block);
    b->set_encoding(THRESHOLD);
    b->set_values(bytes);
    PushResponse r;
    grpc::ClientContext ctx;
    return stub_->Push(&ctx, p, &r);
  };
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
  ExpectCode(push(0, 300, 0, bad_bytes), grpc::StatusCode::INVALID_ARGUMENT,
             "block 0");
  ASSERT_TRUE(push(0, 301, 0, bytes).ok());
  // Trainer 1: an empty message, a zero gradient.
  ASSERT_TRUE(push(1, 302, 0, "").ok());
  // Mean of {1, 0, -1, 0} and 0, times lr 0.5.
  EXPECT_EQ(PullAll(1 - 1), (std::vector<float>{0.75f, 2, 3.25f, 4, 5, 6}));
}

}  // namespace
}  // namespace shardps
