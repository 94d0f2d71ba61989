#include "pserver/checkpoint/job_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "base/job_id.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "common/storage/checkpoint.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "pserver/store/job_tables.h"

namespace shardps {
namespace {

constexpr absl::string_view kFormatLine = "shardps-job-checkpoint 1";
constexpr absl::string_view kManifestPrefix = "JOB-";

uint32_t Crc32(absl::string_view data) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(data.data()),
            static_cast<uInt>(data.size())));
}

// A folder named relative to the root: components of [A-Za-z0-9._-], none
// "." or "..", no leading '/'.
bool IsSafeRelativePath(absl::string_view rel) {
  if (rel.empty() || rel.size() > 1024) return false;
  for (absl::string_view part : absl::StrSplit(rel, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
          c != '_' && c != '-') {
        return false;
      }
    }
  }
  return true;
}

// `folder` relative to `root`; nullopt-like empty when it is not under it.
std::string RelativeTo(const std::string& root, const std::string& folder) {
  std::string prefix = root;
  while (absl::EndsWith(prefix, "/") && prefix.size() > 1) prefix.pop_back();
  prefix += "/";
  if (!absl::StartsWith(folder, prefix)) return "";
  return folder.substr(prefix.size());
}

// The folders under `root` that may hold checkpoints of `job_id`: root
// itself, root/<job>, root/*/<job>.
std::vector<std::string> CandidateFolders(Env* env, const std::string& root,
                                          absl::string_view job_id) {
  std::vector<std::string> out = {root, JoinPath(root, job_id)};
  std::vector<std::string> children;
  if (env->GetChildren(root, &children).ok()) {
    std::sort(children.begin(), children.end());
    for (const std::string& c : children) {
      if (c == job_id) continue;
      const std::string f = JoinPath(JoinPath(root, c), job_id);
      if (env->FileExists(f).ok()) out.push_back(f);
    }
  }
  return out;
}

struct Found {
  std::string folder;
  CheckpointHeader header;
  CheckpointInfo info;
};

// Every complete-looking shard checkpoint under the candidate folders, by
// step.
absl::Status Collect(Env* env, const std::vector<std::string>& folders,
                     std::map<int64_t, std::vector<Found>>* by_step,
                     JobCheckpointSurvey* survey) {
  for (const std::string& folder : folders) {
    CheckpointReader reader(env, folder);
    auto steps = reader.ListComplete();
    if (!steps.ok()) {
      if (absl::IsNotFound(steps.status())) continue;
      survey->unreadable.push_back(
          absl::StrCat(folder, ": ", steps.status().message()));
      continue;
    }
    for (int64_t step : *steps) {
      auto header = reader.LoadHeader(step);
      if (!header.ok()) {
        survey->unreadable.push_back(absl::StrCat(folder, " step ", step, ": ",
                                                  header.status().message()));
        continue;
      }
      Found f;
      f.folder = folder;
      if (!f.info.ParseFromString(header->metadata) || f.info.step() != step) {
        survey->unreadable.push_back(absl::StrCat(
            JoinPath(JoinPath(folder, CheckpointDirName(step)), "MANIFEST"),
            ": unreadable metadata"));
        continue;
      }
      f.header = std::move(*header);
      (*by_step)[step].push_back(std::move(f));
    }
  }
  return absl::OkStatus();
}

// FAILED_PRECONDITION: the shards found do not make a job checkpoint of
// `step`, for reason `why`.
absl::Status IncompleteStep(int64_t step, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("step ", step, ": ", why));
}

// Whether shard `first` of `step` can stand for the job: its placement
// named and known to this build, its job spec one a chief could send.
absl::Status CheckFirstShard(int64_t step, const Found& first) {
  const ShardPlacement& placement = first.info.placement();
  const int p = placement.num_servers();
  if (p <= 0) {
    return IncompleteStep(
        step, absl::StrCat(
                  first.folder,
                  " was written before checkpoints named their shard; it can "
                  "be restored only as it is, onto the same pservers"));
  }
  if (p > kMaxPservers || placement.scheme() != kPlacementScheme) {
    return IncompleteStep(
        step,
        absl::StrCat(first.folder, ": placement scheme ", placement.scheme(),
                     " of ", p, " pservers is not one this build knows"));
  }
  if (absl::Status v = ValidateJob(first.info.job(), 0); !v.ok()) {
    return IncompleteStep(
        step,
        absl::StrCat(first.folder, " holds a job spec no chief could send (",
                     v.message(), ")"));
  }
  return absl::OkStatus();
}

// The shards `found` of `step` by their index in the placement of the
// first (null where none is), each of that placement and job spec and no
// index twice.
absl::StatusOr<std::vector<const Found*>> ShardsByIndex(
    int64_t step, const std::vector<Found>& found) {
  const ShardPlacement& first = found[0].info.placement();
  const int p = first.num_servers();
  std::vector<const Found*> by_index(p, nullptr);
  for (const Found& f : found) {
    const ShardPlacement& pl = f.info.placement();
    if (pl.num_servers() != p || pl.scheme() != first.scheme()) {
      return IncompleteStep(
          step,
          absl::StrCat(f.folder, " is shard ", pl.server_index(), " of ",
                       pl.num_servers(), ", ", found[0].folder, " one of ", p));
    }
    if (pl.server_index() < 0 || pl.server_index() >= p) {
      return IncompleteStep(step, absl::StrCat(f.folder, ": shard ",
                                               pl.server_index(), " of ", p));
    }
    if (by_index[pl.server_index()] != nullptr) {
      return IncompleteStep(
          step,
          absl::StrCat("shard ", pl.server_index(), " of ", p, " is in both ",
                       by_index[pl.server_index()]->folder, " and ", f.folder));
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(
            f.info.job(), found[0].info.job())) {
      return IncompleteStep(step,
                            absl::StrCat(f.folder, " and ", found[0].folder,
                                         " hold different job specs"));
    }
    by_index[pl.server_index()] = &f;
  }
  return by_index;
}

// The job of `step` from the shards found, or why not.
absl::StatusOr<JobCheckpoint> Assemble(absl::string_view job_id, int64_t step,
                                       const std::vector<Found>& found) {
  RETURN_IF_ERROR(CheckFirstShard(step, found[0]));
  const int p = found[0].info.placement().num_servers();
  JobCheckpoint job;
  job.job_id = std::string(job_id);
  job.step = step;
  job.num_servers = p;
  job.shards.resize(p);
  ASSIGN_OR_RETURN(std::vector<const Found*> by_index,
                   ShardsByIndex(step, found));
  std::vector<std::string> missing;
  for (int i = 0; i < p; ++i) {
    if (by_index[i] == nullptr) {
      missing.push_back(absl::StrCat(i));
      continue;
    }
    ShardCheckpoint& s = job.shards[i];
    s.folder = by_index[i]->folder;
    s.info = by_index[i]->info;
    s.manifest_crc = by_index[i]->header.manifest_crc;
    s.bytes = by_index[i]->header.bytes;
    job.generation = std::max(job.generation, s.info.generation());
  }
  if (!missing.empty()) {
    return IncompleteStep(
        step,
        absl::StrCat("no shard ", absl::StrJoin(missing, ", "), " of ", p));
  }
  return job;
}

// Checks `job` (assembled from the shards) against the manifest at `path`.
absl::Status CheckAgainstManifest(Env* env, const std::string& root,
                                  const std::string& path,
                                  const JobCheckpoint& job) {
  std::string text;
  RETURN_IF_ERROR(env->ReadFileToString(path, &text));
  ASSIGN_OR_RETURN(JobCheckpoint m, ParseJobManifest(text, path, root));
  if (m.job_id != job.job_id || m.step != job.step ||
      m.num_servers != job.num_servers) {
    return absl::DataLossError(
        absl::StrCat(path, ": names job ", m.job_id, " step ", m.step, " on ",
                     m.num_servers, " pservers; the shards found are job ",
                     job.job_id, " step ", job.step, " on ", job.num_servers));
  }
  for (int i = 0; i < job.num_servers; ++i) {
    const ShardCheckpoint& want = m.shards[i];
    const ShardCheckpoint& got = job.shards[i];
    if (want.folder != got.folder || want.manifest_crc != got.manifest_crc) {
      return absl::DataLossError(absl::StrFormat(
          "%s: shard %d is %s with MANIFEST crc32 %08x; found %s with %08x",
          path, i, want.folder, want.manifest_crc, got.folder,
          got.manifest_crc));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string JobManifestPath(const std::string& root, absl::string_view job_id,
                            int64_t step) {
  return JoinPath(
      JoinPath(root, job_id),
      absl::StrCat(kManifestPrefix, absl::StrFormat("%012d", step)));
}

absl::StatusOr<std::string> SerializeJobManifest(const std::string& root,
                                                 const JobCheckpoint& job) {
  std::string text =
      absl::StrCat(kFormatLine, "\njob ", job.job_id, "\nstep ", job.step,
                   "\ngeneration ", job.generation, "\nplacement ",
                   kPlacementScheme, " ", job.num_servers, "\n");
  for (size_t i = 0; i < job.shards.size(); ++i) {
    const std::string rel = RelativeTo(root, job.shards[i].folder);
    if (!IsSafeRelativePath(rel)) {
      return absl::InvalidArgumentError(
          absl::StrCat("job manifest: shard folder ", job.shards[i].folder,
                       " is not a plain folder under ", root));
    }
    absl::StrAppendFormat(&text, "shard %d %s %08x\n", i, rel,
                          job.shards[i].manifest_crc);
  }
  absl::StrAppendFormat(&text, "checksum %08x\n", Crc32(text));
  return text;
}

namespace {

// DATA_LOSS: job manifest `path` is damaged, as `what` says.
absl::Status ManifestError(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// The lines of manifest `text` (read from `path`) before its checksum line,
// once its size, framing and checksum are sound.
absl::StatusOr<absl::string_view> CheckedManifestBody(absl::string_view text,
                                                      const std::string& path) {
  if (text.size() > (1 << 20)) return ManifestError(path, "larger than 1 MiB");
  if (!absl::EndsWith(text, "\n")) {
    return ManifestError(path, "no final newline (truncated)");
  }
  const size_t last = text.rfind('\n', text.size() - 2);
  const size_t body_end = last == absl::string_view::npos ? 0 : last + 1;
  absl::string_view checksum_line =
      absl::StripSuffix(text.substr(body_end), "\n");
  uint32_t want = 0;
  if (!absl::ConsumePrefix(&checksum_line, "checksum ") ||
      checksum_line.size() != 8 || !absl::SimpleHexAtoi(checksum_line, &want)) {
    return ManifestError(path, "the last line is not 'checksum <crc32>'");
  }
  if (Crc32(text.substr(0, body_end)) != want) {
    return ManifestError(path, "checksum mismatch (damaged)");
  }
  return text.substr(0, body_end);
}

// Reads the shard lines of manifest `path` into job->shards, one per
// pserver of job->num_servers, each folder under `root`.
absl::Status ParseShardLines(absl::Span<const absl::string_view> lines,
                             const std::string& path, const std::string& root,
                             JobCheckpoint* job) {
  if (lines.size() != static_cast<size_t>(job->num_servers)) {
    return ManifestError(path,
                         absl::StrCat("lists ", lines.size(), " shards for ",
                                      job->num_servers, " pservers"));
  }
  job->shards.resize(job->num_servers);
  for (int i = 0; i < job->num_servers; ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    int index = -1;
    if (f.size() != 4 || f[0] != "shard" || !absl::SimpleAtoi(f[1], &index) ||
        index != i || f[3].size() != 8 ||
        !absl::SimpleHexAtoi(f[3], &job->shards[i].manifest_crc)) {
      return ManifestError(path, absl::StrCat("bad shard line ", i));
    }
    if (!IsSafeRelativePath(f[2])) {
      return ManifestError(
          path, absl::StrCat("shard ", i, " names '", f[2].substr(0, 80),
                             "', not a plain folder under ", root));
    }
    job->shards[i].folder = JoinPath(root, f[2]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobCheckpoint> ParseJobManifest(absl::string_view text,
                                               const std::string& path,
                                               const std::string& root) {
  auto bad = [&path](absl::string_view what) {
    return ManifestError(path, what);
  };
  ASSIGN_OR_RETURN(absl::string_view body, CheckedManifestBody(text, path));
  std::vector<absl::string_view> lines =
      absl::StrSplit(body, '\n', absl::SkipEmpty());
  if (lines.size() < 5 || lines[0] != kFormatLine) {
    return bad(absl::StrCat("not a job manifest (the first line must be '",
                            kFormatLine, "')"));
  }
  JobCheckpoint job;
  int scheme = 0;
  auto field = [&lines](size_t i, absl::string_view key) -> absl::string_view {
    absl::string_view line = lines[i];
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, " ")) {
      return "";
    }
    return line;
  };
  job.job_id = std::string(field(1, "job"));
  if (!ValidateJobId(job.job_id).ok()) return bad("bad job line");
  if (!absl::SimpleAtoi(field(2, "step"), &job.step) || job.step < 0 ||
      job.step > kMaxCheckpointStep) {
    return bad("bad step line");
  }
  if (!absl::SimpleAtoi(field(3, "generation"), &job.generation)) {
    return bad("bad generation line");
  }
  std::vector<absl::string_view> pl =
      absl::StrSplit(field(4, "placement"), ' ');
  if (pl.size() != 2 || !absl::SimpleAtoi(pl[0], &scheme) ||
      !absl::SimpleAtoi(pl[1], &job.num_servers) ||
      scheme != kPlacementScheme || job.num_servers < 1 ||
      job.num_servers > kMaxPservers) {
    return bad("bad placement line");
  }
  RETURN_IF_ERROR(
      ParseShardLines(absl::MakeConstSpan(lines).subspan(5), path, root, &job));
  job.manifest_path = path;
  return job;
}

absl::Status WriteJobManifest(Env* env, const std::string& root,
                              const JobCheckpoint& job) {
  ASSIGN_OR_RETURN(std::string text, SerializeJobManifest(root, job));
  const std::string path = JobManifestPath(root, job.job_id, job.step);
  const std::string dir = JoinPath(root, job.job_id);
  if (!env->FileExists(dir).ok()) RETURN_IF_ERROR(env->CreateDir(dir));
  // Pservers finishing together may write the same manifest at once: each
  // through a temporary file of its own; the renames leave one whole copy.
  absl::BitGen bits;
  absl::Status s = WriteFileAtomically(
      env, path, text,
      absl::StrFormat("%s.tmp-%016x", path, absl::Uniform<uint64_t>(bits)));
  if (s.ok()) s = env->SyncDir(dir);
  return s;
}

absl::StatusOr<JobCheckpointSurvey> SurveyJobCheckpoints(
    Env* env, const std::string& root, absl::string_view job_id,
    bool trust_shards) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  if (absl::Status s = env->FileExists(root); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(root, ": ", s.message()));
  }
  JobCheckpointSurvey survey;
  std::map<int64_t, std::vector<Found>> by_step;
  RETURN_IF_ERROR(
      Collect(env, CandidateFolders(env, root, job_id), &by_step, &survey));
  for (const auto& [step, found] : by_step) {
    auto job = Assemble(job_id, step, found);
    if (!job.ok()) {
      survey.incomplete.push_back(std::string(job.status().message()));
      continue;
    }
    const std::string manifest = JobManifestPath(root, job_id, step);
    if (env->FileExists(manifest).ok()) {
      absl::Status m = CheckAgainstManifest(env, root, manifest, *job);
      if (!m.ok()) {
        survey.damaged_manifests.push_back(manifest);
        if (!trust_shards) {
          survey.incomplete.push_back(
              absl::StrCat("step ", step, ": ", m.message()));
          continue;
        }
      } else {
        job->manifest_path = manifest;
      }
    }
    survey.complete.push_back(std::move(*job));
  }
  return survey;
}

absl::StatusOr<bool> UpdateJobManifest(Env* env, const std::string& root,
                                       absl::string_view job_id, int64_t step) {
  // The shards are this job's own, just written: a manifest that no longer
  // matches them (the step written again at the job's end, or on a new
  // timeline after a rollback) is replaced.
  ASSIGN_OR_RETURN(JobCheckpointSurvey survey,
                   SurveyJobCheckpoints(env, root, job_id,
                                        /*trust_shards=*/true));
  bool wrote = false;
  std::set<std::string> keep;
  for (const JobCheckpoint& job : survey.complete) {
    const std::string path = JobManifestPath(root, job_id, job.step);
    keep.insert(path);
    if (job.step != step || !job.manifest_path.empty()) continue;
    RETURN_IF_ERROR(WriteJobManifest(env, root, job));
    wrote = true;
  }
  // Manifests of steps that are gone, and temporary files of writers that
  // died (older steps only: another pserver may be writing this one's).
  const std::string dir = JoinPath(root, job_id);
  std::vector<std::string> children;
  if (env->GetChildren(dir, &children).ok()) {
    for (const std::string& c : children) {
      absl::string_view rest = c;
      int64_t s = 0;
      if (!absl::ConsumePrefix(&rest, kManifestPrefix) || rest.size() < 12 ||
          !absl::SimpleAtoi(rest.substr(0, 12), &s)) {
        continue;
      }
      // Another pserver may be writing a temporary file of this step or a
      // later one; a whole manifest of a step that is not complete here
      // any more goes, whichever step.
      const bool temporary = rest.size() > 12;
      if (temporary && s >= step) continue;
      const std::string path = JoinPath(dir, c);
      if (keep.count(path) == 0) env->DeleteFile(path).IgnoreError();
    }
  }
  return wrote;
}

absl::StatusOr<JobCheckpoint> FindJobCheckpoint(Env* env,
                                                const std::string& root,
                                                absl::string_view job_id,
                                                int64_t step) {
  ASSIGN_OR_RETURN(JobCheckpointSurvey survey,
                   SurveyJobCheckpoints(env, root, job_id));
  for (auto it = survey.complete.rbegin(); it != survey.complete.rend(); ++it) {
    if (step >= 0 && it->step != step) continue;
    for (const std::string& why : survey.incomplete) {
      LOG(WARNING) << "job " << job_id << " under " << root
                   << ": not complete, not used: " << why;
    }
    return std::move(*it);
  }
  std::vector<std::string> seen = survey.incomplete;
  seen.insert(seen.end(), survey.unreadable.begin(), survey.unreadable.end());
  return absl::NotFoundError(absl::StrCat(
      "no complete checkpoint of job ", job_id,
      step >= 0 ? absl::StrCat(" at step ", step) : std::string(), " under ",
      root,
      seen.empty() ? std::string(" (no pserver checkpoint of it there)")
                   : absl::StrCat(": ", absl::StrJoin(seen, "; "))));
}

}  // namespace shardps
