#include "common/grpc/grpc_wire.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

// Whether some slice of `buffer` starts at `data` (was not copied).
bool HasSliceAt(const grpc::ByteBuffer& buffer, const void* data) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  for (const grpc::Slice& s : slices) {
    if (s.begin() == data) return true;
  }
  return false;
}

DensePush Header() {
  DensePush p;
  p.header.set_trainer_id(3);
  p.header.set_step(1234567);
  p.header.set_request_id(0xfedcba9876543210ull);
  p.header.set_generation(7);
  p.header.set_incarnation(99);
  return p;
}

TEST(SerializeDensePushTest, BytesAreProtobufsAndValuesAreNotCopied) {
  std::vector<float> big(70000), small(10);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& x : big) x = u(rng);
  for (float& x : small) x = u(rng);
  const std::string half(300, '\x3c');
  DensePush p = Header();
  p.blocks.push_back(
      {0, 0, FLOAT32,
       absl::string_view(reinterpret_cast<const char*>(big.data()),
                         big.size() * 4)});
  p.blocks.push_back(
      {2, 17, FLOAT32,
       absl::string_view(reinterpret_cast<const char*>(small.data()),
                         small.size() * 4)});
  p.blocks.push_back({1, 0, FLOAT16, half});
  p.blocks.push_back({5, 300, THRESHOLD, absl::string_view()});  // empty
  const grpc::ByteBuffer buf = SerializeDensePush(p);
  EXPECT_EQ(ByteBufferToString(buf), ToPushRequest(p).SerializeAsString());
  EXPECT_EQ(DensePushByteSize(p), ToPushRequest(p).ByteSizeLong());
  EXPECT_TRUE(HasSliceAt(buf, big.data()));
  EXPECT_FALSE(HasSliceAt(buf, small.data()));  // small: copied

  PushRequest parsed;
  ASSERT_TRUE(ParseByteBuffer(buf, &parsed).ok());
  ASSERT_EQ(parsed.blocks_size(), 4);
  EXPECT_EQ(parsed.blocks(0).values(), Bytes(big));
  EXPECT_EQ(parsed.blocks(1).block(), 17u);
  EXPECT_EQ(parsed.blocks(2).encoding(), FLOAT16);
  EXPECT_EQ(parsed.blocks(3).encoding(), THRESHOLD);
  EXPECT_EQ(parsed.incarnation(), 99u);
}

TEST(SerializeDensePushTest, DefaultFieldsAreLeftOutAsProtobufDoes) {
  DensePush p;  // every header field 0
  EXPECT_EQ(ByteBufferToString(SerializeDensePush(p)), "");
  p.blocks.push_back({0, 0, FLOAT32, absl::string_view()});
  EXPECT_EQ(ByteBufferToString(SerializeDensePush(p)),
            ToPushRequest(p).SerializeAsString());
}

TEST(SerializeDensePushTest, SharedRegionFieldsAreProtobufs) {
  DensePush p = Header();
  p.header.set_shared_region(0x1234567890abcdefULL);
  p.blocks.push_back({0, 3, FLOAT32, absl::string_view(), 64});
  p.blocks.push_back({1, 0, FLOAT32, absl::string_view(), 262208});
  const grpc::ByteBuffer buf = SerializeDensePush(p);
  EXPECT_EQ(ByteBufferToString(buf), ToPushRequest(p).SerializeAsString());
  EXPECT_EQ(DensePushByteSize(p), ToPushRequest(p).ByteSizeLong());
  PushRequest parsed;
  ASSERT_TRUE(ParseByteBuffer(buf, &parsed).ok());
  EXPECT_EQ(parsed.shared_region(), 0x1234567890abcdefULL);
  ASSERT_EQ(parsed.blocks_size(), 2);
  EXPECT_EQ(parsed.blocks(1).shared_offset(), 262208u);
}

TEST(SerializeAliasingTest, LargeValuesAreSharedUntilTheBufferIsGone) {
  auto resp = std::make_shared<PullResponse>();
  resp->set_wait_micros(12);
  for (int b = 0; b < 3; ++b) {
    DenseBlock* d = resp->add_blocks();
    d->set_table_id(1);
    d->set_block(b);
    d->set_version(40 + b);
    d->mutable_values()->assign(b == 1 ? 64 : 100000, static_cast<char>(b));
  }
  const std::string want = resp->SerializeAsString();
  const void* big = resp->blocks(0).values().data();
  const void* tiny = resp->blocks(1).values().data();
  {
    grpc::ByteBuffer buf = SerializeAliasing(*resp, resp);
    EXPECT_EQ(ByteBufferToString(buf), want);
    EXPECT_TRUE(HasSliceAt(buf, big));
    EXPECT_FALSE(HasSliceAt(buf, tiny));
    EXPECT_GT(resp.use_count(), 1);  // held by the slices
  }
  EXPECT_EQ(resp.use_count(), 1);
}

TEST(SerializeAliasingTest, SmallMessagesRoundTrip) {
  PullRequest req;
  req.set_trainer_id(1);
  req.set_min_version(5);
  req.add_blocks()->set_block(3);
  const grpc::ByteBuffer buf = SerializeAliasing(req, nullptr);
  PullRequest back;
  ASSERT_TRUE(ParseByteBuffer(buf, &back).ok());
  EXPECT_EQ(back.SerializeAsString(), req.SerializeAsString());
}

TEST(ParseByteBufferTest, GarbageIsInvalidArgument) {
  const std::string junk = "\x22\xff\xff\xff\xff\x0f garbage";
  grpc::Slice s(junk.data(), junk.size());
  grpc::ByteBuffer buf(&s, 1);
  PushRequest req;
  const absl::Status st = ParseByteBuffer(buf, &req);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("shardps.PushRequest"));
}

}  // namespace
}  // namespace shardps
