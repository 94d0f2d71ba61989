#include "common/transport/dense_push.h"

#include "google/protobuf/wire_format_lite.h"

namespace shardps {

PushRequest ToPushRequest(const DensePush& push) {
  PushRequest req = push.header;
  for (const DenseValuesRef& b : push.blocks) {
    DenseBlock* d = req.add_blocks();
    d->set_table_id(b.table_id);
    d->set_block(b.block);
    d->set_encoding(b.encoding);
    d->set_values(b.bytes.data(), b.bytes.size());
    d->set_shared_offset(b.shared_offset);
  }
  return req;
}

size_t DensePushByteSize(const DensePush& push) {
  using google::protobuf::internal::WireFormatLite;
  size_t n = push.header.ByteSizeLong();
  for (const DenseValuesRef& b : push.blocks) {
    DenseBlock d;
    d.set_table_id(b.table_id);
    d.set_block(b.block);
    d.set_encoding(b.encoding);
    d.set_shared_offset(b.shared_offset);
    size_t inner = d.ByteSizeLong();
    if (!b.bytes.empty()) {
      inner += 1 + WireFormatLite::UInt64Size(b.bytes.size()) + b.bytes.size();
    }
    n += 1 + WireFormatLite::UInt64Size(inner) + inner;
  }
  return n;
}

}  // namespace shardps
