// Test helpers for code that calls a RequestHandler directly. Header-only;
// tests only.
#ifndef SHARDPS_PSERVER_TESTING_HANDLER_TESTING_H_
#define SHARDPS_PSERVER_TESTING_HANDLER_TESTING_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "pserver/service/request_handler.h"

namespace shardps {
namespace testing {

// `handler`'s answer to `req`, waiting up to 10 s for it (a test failure
// after that).
inline absl::Status PullAndWait(RequestHandler* handler, const PullRequest& req,
                                PullResponse* resp) {
  absl::Notification done;
  absl::Status status;
  handler->Pull(req, resp, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  return status;
}

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_PSERVER_TESTING_HANDLER_TESTING_H_
