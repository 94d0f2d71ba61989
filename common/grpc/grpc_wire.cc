#include "common/grpc/grpc_wire.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"

namespace shardps {
namespace {

using google::protobuf::internal::WireFormatLite;

// Copied bytes go to slices of this size at most; protobuf asks for more
// as it fills them.
constexpr size_t kMaxCopySliceBytes = 64 << 10;
constexpr size_t kMinCopySliceBytes = 512;

void ReleaseOwner(void* owner) {
  delete static_cast<std::shared_ptr<const void>*>(owner);
}
void ReleaseNothing(void*) {}

// A ZeroCopyOutputStream into grpc::Slices that accepts aliased writes: a
// large field becomes a slice over the caller's memory instead of a copy.
class SliceOutputStream final
    : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  SliceOutputStream(std::shared_ptr<const void> owner, size_t size_hint)
      : owner_(std::move(owner)),
        next_size_(
            std::clamp(size_hint, kMinCopySliceBytes, kMaxCopySliceBytes)) {}

  bool Next(void** data, int* size) override {
    EndCopySlice();
    copy_ = grpc::Slice(next_size_);
    next_size_ = std::min(next_size_ * 2, kMaxCopySliceBytes);
    copy_used_ = copy_.size();
    byte_count_ += static_cast<int64_t>(copy_used_);
    *data = const_cast<uint8_t*>(copy_.begin());
    *size = static_cast<int>(copy_used_);
    return true;
  }

  void BackUp(int count) override {
    copy_used_ -= static_cast<size_t>(count);
    byte_count_ -= count;
  }

  int64_t ByteCount() const override { return byte_count_; }

  bool AllowsAliasing() const override { return true; }

  bool WriteAliasedRaw(const void* data, int size) override {
    EndCopySlice();
    const size_t n = static_cast<size_t>(size);
    if (n < kMinAliasedBytes) {
      slices_.emplace_back(data, n);  // copies
    } else if (owner_ == nullptr) {
      slices_.emplace_back(const_cast<void*>(data), n, &ReleaseNothing,
                           nullptr);
    } else {
      slices_.emplace_back(const_cast<void*>(data), n, &ReleaseOwner,
                           new std::shared_ptr<const void>(owner_));
    }
    byte_count_ += size;
    return true;
  }

  grpc::ByteBuffer Finish() {
    EndCopySlice();
    return grpc::ByteBuffer(slices_.data(), slices_.size());
  }

 private:
  // Keeps the used part of the current copy slice.
  void EndCopySlice() {
    if (copy_.size() == 0) return;
    if (copy_used_ > 0) slices_.push_back(copy_.sub(0, copy_used_));
    copy_ = grpc::Slice();
    copy_used_ = 0;
  }

  const std::shared_ptr<const void> owner_;
  size_t next_size_;
  grpc::Slice copy_;
  size_t copy_used_ = 0;
  int64_t byte_count_ = 0;
  std::vector<grpc::Slice> slices_;
};

}  // namespace

grpc::ByteBuffer SerializeAliasing(const google::protobuf::MessageLite& msg,
                                   std::shared_ptr<const void> owner) {
  const size_t size = msg.ByteSizeLong();
  SliceOutputStream out(std::move(owner), size);
  {
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.EnableAliasing(true);
    msg.SerializeWithCachedSizes(&coded);
  }
  return out.Finish();
}

grpc::ByteBuffer SerializeDensePush(const DensePush& push) {
  // Protobuf writes fields in number order: those of the header before
  // `blocks` (4), the blocks, then those after; within a block table_id,
  // block, values (3), then encoding and shared_offset.
  PushRequest head = push.header;
  head.clear_blocks();
  head.clear_sparse();
  head.clear_generation();
  head.clear_incarnation();
  head.clear_shared_region();
  PushRequest tail;
  tail.set_generation(push.header.generation());
  tail.set_incarnation(push.header.incarnation());
  tail.set_shared_region(push.header.shared_region());
  SliceOutputStream out(nullptr, head.ByteSizeLong() + tail.ByteSizeLong() +
                                     push.blocks.size() * 24);
  {
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.EnableAliasing(true);
    head.ByteSizeLong();
    head.SerializeWithCachedSizes(&coded);
    for (const DenseValuesRef& b : push.blocks) {
      DenseBlock before;
      before.set_table_id(b.table_id);
      before.set_block(b.block);
      DenseBlock after;
      after.set_encoding(b.encoding);
      after.set_shared_offset(b.shared_offset);
      const size_t n = b.bytes.size();
      size_t inner = before.ByteSizeLong() + after.ByteSizeLong();
      if (n > 0) {
        inner += WireFormatLite::TagSize(DenseBlock::kValuesFieldNumber,
                                         WireFormatLite::TYPE_BYTES) +
                 google::protobuf::io::CodedOutputStream::VarintSize64(n) + n;
      }
      coded.WriteTag(
          WireFormatLite::MakeTag(PushRequest::kBlocksFieldNumber,
                                  WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
      coded.WriteVarint64(inner);
      before.SerializeWithCachedSizes(&coded);
      if (n > 0) {
        coded.WriteTag(
            WireFormatLite::MakeTag(DenseBlock::kValuesFieldNumber,
                                    WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
        coded.WriteVarint64(n);
        coded.WriteRawMaybeAliased(b.bytes.data(), static_cast<int>(n));
      }
      after.SerializeWithCachedSizes(&coded);
    }
    tail.ByteSizeLong();
    tail.SerializeWithCachedSizes(&coded);
  }
  return out.Finish();
}

absl::Status ParseByteBuffer(const grpc::ByteBuffer& buffer,
                             google::protobuf::MessageLite* msg) {
  grpc::ByteBuffer view(buffer);  // shares the slices
  grpc::ProtoBufferReader reader(&view);
  if (!reader.status().ok() || !msg->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot parse the ", msg->GetTypeName(), " received"));
  }
  return absl::OkStatus();
}

std::string ByteBufferToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

}  // namespace shardps
