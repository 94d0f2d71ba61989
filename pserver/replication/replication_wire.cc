#include "pserver/replication/replication_wire.h"

#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace shardps {

void ToMessage(const View& view, ViewMessage* out) {
  out->set_number(view.number);
  out->mutable_members()->Assign(view.members.begin(), view.members.end());
  out->mutable_joining()->Assign(view.joining.begin(), view.joining.end());
  out->mutable_primaries()->Assign(view.primaries.begin(),
                                   view.primaries.end());
}

absl::StatusOr<View> FromMessage(const ViewMessage& m) {
  View v;
  v.number = m.number();
  if (v.number < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("view number ", v.number, " is negative"));
  }
  for (int32_t member : m.members()) {
    if (member < 0 || (!v.members.empty() && member <= v.members.back())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "view ", v.number, ": members must be ascending pserver indices"));
    }
    v.members.push_back(member);
  }
  for (int32_t j : m.joining()) {
    if (j < 0 || (!v.joining.empty() && j <= v.joining.back()) || v.Has(j)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "view ", v.number,
          ": joining pservers must be ascending indices, none a member"));
    }
    v.joining.push_back(j);
  }
  for (int32_t p : m.primaries()) {
    if (p < -1 || (p >= 0 && !v.Has(p))) {
      return absl::InvalidArgumentError(
          absl::StrCat("view ", v.number, ": primary ", p, " is not a member"));
    }
    v.primaries.push_back(p);
  }
  return v;
}

void ToMessage(const Ballot& ballot, BallotMessage* out) {
  out->set_round(ballot.round);
  out->set_proposer(ballot.proposer);
}

Ballot FromMessage(const BallotMessage& m) {
  return Ballot{m.round(), m.proposer()};
}

void ToMessage(const ViewAcceptor::PrepareReply& r, ViewPrepareResponse* out) {
  out->set_promised(r.promised);
  ToMessage(r.promised_ballot, out->mutable_promised_ballot());
  if (r.accepted.has_value()) ToMessage(*r.accepted, out->mutable_accepted());
  ToMessage(r.accepted_view, out->mutable_accepted_view());
  ToMessage(r.committed, out->mutable_committed());
}

absl::StatusOr<ViewAcceptor::PrepareReply> FromMessage(
    const ViewPrepareResponse& m) {
  ViewAcceptor::PrepareReply r;
  r.promised = m.promised();
  r.promised_ballot = FromMessage(m.promised_ballot());
  if (m.has_accepted()) r.accepted = FromMessage(m.accepted());
  ASSIGN_OR_RETURN(r.accepted_view, FromMessage(m.accepted_view()));
  ASSIGN_OR_RETURN(r.committed, FromMessage(m.committed()));
  return r;
}

void ToMessage(const AcceptorState& s, ViewPrepareResponse* out) {
  ViewAcceptor::PrepareReply r;
  r.promised_ballot = s.promised;
  r.accepted = s.accepted;
  r.accepted_view = s.accepted_view;
  r.committed = s.committed;
  ToMessage(r, out);
}

absl::StatusOr<AcceptorState> StateOf(const ViewPrepareResponse& m) {
  ASSIGN_OR_RETURN(ViewAcceptor::PrepareReply r, FromMessage(m));
  AcceptorState s;
  s.committed = std::move(r.committed);
  s.promised = r.promised_ballot;
  s.accepted = r.accepted;
  s.accepted_view = std::move(r.accepted_view);
  return s;
}

void ToMessage(const AppliedUpdate& u, ReplicatedUpdate* out) {
  out->set_table_id(u.table_id);
  out->set_unit(u.block);
  out->set_step(u.step);
  out->set_version(u.version);
  out->set_sync(u.sync);
  out->set_job_step(u.job_step);
  out->mutable_keys()->Assign(u.keys.begin(), u.keys.end());
  out->mutable_scales()->Assign(u.scales.begin(), u.scales.end());
  out->set_grad(reinterpret_cast<const char*>(u.grad.data()),
                u.grad.size() * sizeof(float));
  if (u.trust_ratio != 1.0f) out->set_trust_ratio(u.trust_ratio);
  out->mutable_evicted_full()->Assign(u.evicted_full.begin(),
                                      u.evicted_full.end());
  out->mutable_expired()->Assign(u.expired.begin(), u.expired.end());
}

absl::StatusOr<AppliedUpdate> FromMessage(const ReplicatedUpdate& m) {
  auto bad = [&m](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicated update of table id ", m.table_id(), " unit ",
                     m.unit(), ": ", what));
  };
  if (m.grad().size() % sizeof(float) != 0) {
    return bad(absl::StrCat(m.grad().size(),
                            " gradient bytes are not whole float32 values"));
  }
  const size_t keys = static_cast<size_t>(m.keys_size());
  if (m.scales_size() != 1 &&
      (keys == 0 || static_cast<size_t>(m.scales_size()) != keys)) {
    return bad(absl::StrCat(m.scales_size(), " scales for ", keys, " keys"));
  }
  if (m.has_trust_ratio() && (!(m.trust_ratio() >= 0) ||
                              !std::isfinite(m.trust_ratio()) || keys != 0)) {
    return bad(absl::StrCat("trust ratio ", m.trust_ratio(),
                            " (finite, >= 0, dense units only)"));
  }
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(keys);
  for (uint64_t k : m.keys()) {
    if (!seen.insert(k).second) {
      return bad(absl::StrCat("key ", k, " appears twice"));
    }
  }
  AppliedUpdate u;
  u.table_id = m.table_id();
  u.block = m.unit();
  u.step = m.step();
  u.version = m.version();
  u.sync = m.sync();
  u.job_step = m.job_step();
  u.keys.assign(m.keys().begin(), m.keys().end());
  u.scales.assign(m.scales().begin(), m.scales().end());
  u.trust_ratio = m.has_trust_ratio() ? m.trust_ratio() : 1.0f;
  u.evicted_full.assign(m.evicted_full().begin(), m.evicted_full().end());
  u.expired.assign(m.expired().begin(), m.expired().end());
  u.grad.resize(m.grad().size() / sizeof(float));
  std::memcpy(u.grad.data(), m.grad().data(), m.grad().size());
  return u;
}

}  // namespace shardps
