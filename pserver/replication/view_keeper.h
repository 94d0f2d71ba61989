#ifndef SHARDPS_PSERVER_REPLICATION_VIEW_KEEPER_H_
#define SHARDPS_PSERVER_REPLICATION_VIEW_KEEPER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/storage/env.h"
#include "proto/replication.pb.h"
#include "pserver/replication/view_consensus.h"

namespace shardps {

// One pserver's place in a job's views (docs/replication.md, "Views"):
// its acceptor in the view agreement, saved before every answer that
// depends on it; the newest view it knows decided, learned only when a
// majority of the pservers show it decided (view_witness.h); its
// proposals; and the fence (serving nothing until rejoined). The peers
// carry the messages. Thread-safe.
class ViewKeeper {
 public:
  struct Options {
    int self = 0;
    int num_servers = 1;
    // Where the acceptor's state is saved (view_state_file.h); empty: in
    // memory only.
    std::string state_path;
    Env* env = nullptr;  // null: Env::Default()
    int max_view_rounds = 5;
  };
  // `others[i]`: pserver i's acceptor (null at options.self). Loads the
  // state from state_path (view 0, every pserver, when there is none):
  // DATA_LOSS for a damaged file.
  static absl::StatusOr<std::unique_ptr<ViewKeeper>> Create(
      Options options, std::vector<ViewPeer*> others);
  ~ViewKeeper();

  // Called after the view or the fence changed (what the pserver serves).
  void set_on_change(std::function<void()> f) { on_change_ = std::move(f); }

  // The newest view this pserver knows decided.
  View view() const ABSL_LOCKS_EXCLUDED(mu_);
  // The view, or when fenced nullopt with *why set to the reason.
  std::optional<View> ServingView(std::string* why) const
      ABSL_LOCKS_EXCLUDED(mu_);
  bool fenced() const ABSL_LOCKS_EXCLUDED(mu_);
  // Serve nothing until Unfence (logged once, with `why`).
  void Fence(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  void Unfence() ABSL_LOCKS_EXCLUDED(mu_);

  // Learns the newest view the pservers show decided when `v`, which
  // another pserver or a trainer told of, is newer than this pserver's
  // (LearnDecided).
  absl::Status Learn(const View& v) ABSL_LOCKS_EXCLUDED(mu_);
  // Asks every pserver for its acceptor state and learns the newest view
  // after `after` that a majority shows decided; FAILED_PRECONDITION,
  // logged, naming how many answered, when none is and `told` (the view
  // told of; null: none) was.
  absl::Status LearnDecided(int64_t after, const View* told)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the agreement (ProposeView) until the decided view has what
  // `change` wants; one proposal at a time from this pserver.
  absl::StatusOr<View> Propose(const ViewChange& change)
      ABSL_LOCKS_EXCLUDED(propose_mu_, mu_);

  // The acceptor's calls from other pservers.
  absl::Status HandlePrepare(const ViewPrepareRequest& req,
                             ViewPrepareResponse* resp)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HandleAccept(const ViewAcceptRequest& req,
                            ViewAcceptResponse* resp) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HandleCommit(const ViewCommitRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HandleInspect(ViewPrepareResponse* resp) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class LocalPeer;
  ViewKeeper(Options options, std::vector<ViewPeer*> others,
             AcceptorState state);
  absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every pserver's acceptor, this one's included, in index order.
  std::vector<ViewPeer*> AllPeers() const;
  void Changed() const {
    if (on_change_) on_change_();
  }

  const Options options_;
  Env* const env_;
  std::vector<ViewPeer*> peers_;  // this pserver's slot: local_
  std::unique_ptr<LocalPeer> local_;
  std::function<void()> on_change_;

  absl::Mutex propose_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  ViewAcceptor acceptor_ ABSL_GUARDED_BY(mu_);
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
  std::string fence_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_VIEW_KEEPER_H_
