#include "pserver/replication/view_keeper.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "pserver/replication/replication_wire.h"
#include "pserver/replication/view_state_file.h"
#include "pserver/replication/view_witness.h"

namespace shardps {

// This pserver's acceptor, as ProposeView and WitnessView reach every
// pserver's.
class ViewKeeper::LocalPeer : public ViewPeer {
 public:
  explicit LocalPeer(ViewKeeper* keeper) : keeper_(keeper) {}
  absl::StatusOr<ViewAcceptor::PrepareReply> Prepare(
      int64_t number, const Ballot& ballot) override {
    ViewPrepareRequest req;
    req.set_number(number);
    ToMessage(ballot, req.mutable_ballot());
    ViewPrepareResponse resp;
    RETURN_IF_ERROR(keeper_->HandlePrepare(req, &resp));
    return FromMessage(resp);
  }
  absl::StatusOr<bool> Accept(int64_t number, const Ballot& ballot,
                              const View& view) override {
    ViewAcceptRequest req;
    req.set_number(number);
    ToMessage(ballot, req.mutable_ballot());
    ToMessage(view, req.mutable_view());
    ViewAcceptResponse resp;
    RETURN_IF_ERROR(keeper_->HandleAccept(req, &resp));
    return resp.accepted();
  }
  absl::Status Commit(const View& view) override {
    ViewCommitRequest req;
    ToMessage(view, req.mutable_view());
    return keeper_->HandleCommit(req);
  }
  absl::StatusOr<AcceptorState> Inspect() override {
    ViewPrepareResponse resp;
    RETURN_IF_ERROR(keeper_->HandleInspect(&resp));
    return StateOf(resp);
  }

 private:
  ViewKeeper* const keeper_;
};

absl::StatusOr<std::unique_ptr<ViewKeeper>> ViewKeeper::Create(
    Options options, std::vector<ViewPeer*> others) {
  Env* env = options.env != nullptr ? options.env : Env::Default();
  AcceptorState state;
  for (int i = 0; i < options.num_servers; ++i) {
    state.committed.members.push_back(i);
  }
  if (!options.state_path.empty()) {
    absl::StatusOr<AcceptorState> loaded =
        LoadAcceptorState(env, options.state_path);
    if (loaded.ok()) {
      state = *std::move(loaded);
      LOG(INFO) << "pserver " << options.self << ": replication state "
                << options.state_path << ": " << state.committed.DebugString();
    } else if (!absl::IsNotFound(loaded.status())) {
      return loaded.status();
    }
  }
  return std::unique_ptr<ViewKeeper>(
      new ViewKeeper(std::move(options), std::move(others), std::move(state)));
}

ViewKeeper::ViewKeeper(Options options, std::vector<ViewPeer*> others,
                       AcceptorState state)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()),
      peers_(std::move(others)),
      local_(std::make_unique<LocalPeer>(this)),
      acceptor_(std::move(state)) {
  peers_.resize(options_.num_servers, nullptr);
  peers_[options_.self] = local_.get();
}

ViewKeeper::~ViewKeeper() = default;

std::vector<ViewPeer*> ViewKeeper::AllPeers() const { return peers_; }

View ViewKeeper::view() const {
  absl::MutexLock l(&mu_);
  return acceptor_.state().committed;
}

std::optional<View> ViewKeeper::ServingView(std::string* why) const {
  absl::MutexLock l(&mu_);
  if (fenced_) {
    *why = fence_reason_;
    return std::nullopt;
  }
  return acceptor_.state().committed;
}

bool ViewKeeper::fenced() const {
  absl::MutexLock l(&mu_);
  return fenced_;
}

void ViewKeeper::Fence(const absl::Status& why) {
  {
    absl::MutexLock l(&mu_);
    if (fenced_) return;
    fenced_ = true;
    fence_reason_ = std::string(why.message().substr(0, 300));
    LOG(ERROR) << "pserver " << options_.self << ": fenced: " << why.message()
               << "; serving nothing until it has rejoined as a backup";
  }
  Changed();
}

void ViewKeeper::Unfence() {
  absl::MutexLock l(&mu_);
  fenced_ = false;
}

absl::Status ViewKeeper::Learn(const View& v) {
  const int64_t known = view().number;
  if (v.number <= known) return absl::OkStatus();
  return LearnDecided(known, &v);
}

absl::Status ViewKeeper::LearnDecided(int64_t after, const View* told) {
  const Witnessed w = WitnessView(AllPeers(), after);
  if (!w.decided.has_value()) {
    if (told == nullptr) return absl::OkStatus();
    const std::string what = absl::StrCat(
        "pserver ", options_.self, ": ", told->DebugString(),
        " not learned: ", w.answered, " of ", options_.num_servers,
        " pservers answered, and no majority of them shows it decided");
    LOG_EVERY_T(WARNING, 1) << what;
    return absl::FailedPreconditionError(what);
  }
  {
    absl::MutexLock l(&mu_);
    if (!acceptor_.Commit(*w.decided)) return absl::OkStatus();  // older
    LOG(INFO) << "pserver " << options_.self << ": learned "
              << w.decided->DebugString();
    absl::Status s = SaveLocked();
    if (!s.ok()) LOG(ERROR) << "saving the replication state: " << s;
  }
  Changed();
  return absl::OkStatus();
}

absl::StatusOr<View> ViewKeeper::Propose(const ViewChange& change) {
  absl::MutexLock p(&propose_mu_);
  return ProposeView(AllPeers(), options_.self, change,
                     options_.max_view_rounds);
}

absl::Status ViewKeeper::SaveLocked() {
  if (options_.state_path.empty()) return absl::OkStatus();
  return SaveAcceptorState(env_, options_.state_path, acceptor_.state());
}

absl::Status ViewKeeper::HandlePrepare(const ViewPrepareRequest& req,
                                       ViewPrepareResponse* resp) {
  absl::MutexLock l(&mu_);
  ViewAcceptor::PrepareReply r =
      acceptor_.Prepare(req.number(), FromMessage(req.ballot()));
  if (r.promised) RETURN_IF_ERROR(SaveLocked());
  ToMessage(r, resp);
  return absl::OkStatus();
}

absl::Status ViewKeeper::HandleAccept(const ViewAcceptRequest& req,
                                      ViewAcceptResponse* resp) {
  ASSIGN_OR_RETURN(const View v, FromMessage(req.view()));
  absl::MutexLock l(&mu_);
  const bool ok = acceptor_.Accept(req.number(), FromMessage(req.ballot()), v);
  if (ok) RETURN_IF_ERROR(SaveLocked());
  resp->set_accepted(ok);
  return absl::OkStatus();
}

absl::Status ViewKeeper::HandleCommit(const ViewCommitRequest& req) {
  ASSIGN_OR_RETURN(const View v, FromMessage(req.view()));
  return Learn(v);
}

absl::Status ViewKeeper::HandleInspect(ViewPrepareResponse* resp) const {
  absl::MutexLock l(&mu_);
  ToMessage(acceptor_.state(), resp);
  return absl::OkStatus();
}

}  // namespace shardps
