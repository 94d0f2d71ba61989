#include "pserver/store/update_forwarder.h"

#include <utility>

#include "glog/logging.h"

namespace shardps {
namespace {
thread_local UpdateCollector* current_collector = nullptr;
}  // namespace

UpdateCollector::UpdateCollector() : outer_(current_collector) {
  current_collector = this;
}

UpdateCollector::~UpdateCollector() { current_collector = outer_; }

void UpdateCollector::Add(AppliedUpdate u) {
  CHECK(current_collector != nullptr)
      << "an update of table id " << u.table_id << " unit " << u.block
      << " was applied where no collector forwards it to the backups";
  current_collector->updates_.push_back(std::move(u));
}

}  // namespace shardps
