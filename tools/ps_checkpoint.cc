// Job checkpoints offline (docs/fault_tolerance.md, "Restoring onto other
// pservers"; the layout: docs/checkpoint_format.md, "Job checkpoints").
//
//   ps_checkpoint info --from DIR [--job_id ID]
//     the complete job checkpoints under DIR (one pserver's
//     --checkpoint_dir, or a folder holding several), each with its
//     pservers and size, and the steps that are not whole, saying why.
//   ps_checkpoint reshard --from DIR --to NEW --pservers M [--step S]
//     [--job_id ID]
//     writes the newest complete checkpoint (or that of step S) for M
//     pservers: NEW/pserver-<i>/<job>/ckpt-<step>/ and the job manifest
//     NEW/<job>/JOB-<step>. Start pserver i with
//     --checkpoint_dir=NEW/pserver-<i> and the trainers with M --pservers
//     in that order.
//   ps_checkpoint export --from DIR --out NEW [--fp16] [--config FILE]
//     [--step S] [--job_id ID]
//     writes the model unsharded for serving (docs/saved_model.md):
//     NEW/params.bin with every dense table, NEW/sparse-<table>.bin with
//     each sparse table's rows (values only, by key; --fp16: as IEEE
//     half), and NEW/model.pbtxt, a copy of --config, when given.
//
// Exit status: 0 done, 1 failed (one line on stderr saying why), 2 bad
// usage.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/storage/env.h"
#include "common/storage/fault_injection_env.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "pserver/checkpoint/job_checkpoint.h"
#include "pserver/checkpoint/model_export.h"
#include "pserver/checkpoint/reshard.h"

DEFINE_string(from, "", "the folder to read job checkpoints from");
DEFINE_string(to, "", "reshard: the new folder to write (must not exist)");
DEFINE_int32(pservers, 0, "reshard: how many pservers the job will have");
DEFINE_int64(step, -1, "reshard: the step to take; -1: the newest complete");
DEFINE_string(job_id, "default", "the job (the trainers' --job_id)");
DEFINE_string(out, "", "export: the new folder to write (must not exist)");
DEFINE_bool(fp16, false, "export: sparse rows' values as IEEE half");
DEFINE_string(config, "", "export: the model's config, copied as model.pbtxt");

namespace {

constexpr char kUsage[] =
    "ps_checkpoint info --from DIR [--job_id ID]\n"
    "       ps_checkpoint reshard --from DIR --to NEW --pservers M "
    "[--step S] [--job_id ID]\n"
    "       ps_checkpoint export --from DIR --out NEW [--fp16] [--config FILE] "
    "[--step S] [--job_id ID]";

int Fail(const absl::Status& s) {
  std::cerr << "ps_checkpoint: " << s.message() << "\n";
  return 1;
}

int Info() {
  auto survey = shardps::SurveyJobCheckpoints(shardps::Env::Default(),
                                              FLAGS_from, FLAGS_job_id);
  if (!survey.ok()) return Fail(survey.status());
  for (const shardps::JobCheckpoint& j : survey->complete) {
    int64_t bytes = 0;
    for (const shardps::ShardCheckpoint& s : j.shards) bytes += s.bytes;
    const shardps::CheckpointInfo& info = j.shards[0].info;
    std::cout << absl::StrFormat(
        "step %d: complete, %d pserver(s), %.1f MB, %s, generation %d, %s "
        "mode%s\n",
        j.step, j.num_servers, bytes / 1e6,
        info.delta() ? absl::StrCat("delta on step ", info.delta_base())
                     : std::string("full"),
        j.generation, info.job().mode() == shardps::SYNC ? "sync" : "async",
        j.manifest_path.empty()
            ? ""
            : absl::StrCat(", job manifest ", j.manifest_path));
    for (size_t i = 0; i < j.shards.size(); ++i) {
      std::cout << absl::StrFormat("  pserver %d: %s (%.1f MB)\n", i,
                                   j.shards[i].folder, j.shards[i].bytes / 1e6);
    }
  }
  for (const std::string& s : survey->incomplete) {
    std::cout << "incomplete: " << s << "\n";
  }
  for (const std::string& s : survey->unreadable) {
    std::cout << "unreadable: " << s << "\n";
  }
  if (survey->complete.empty()) {
    std::cout << "no complete checkpoint of job " << FLAGS_job_id << " under "
              << FLAGS_from << "\n";
    return 1;
  }
  return 0;
}

// The Env the tool writes through: the default one, or, for the tests,
// one that crashes or fails where SHARDPS_TEST_CHECKPOINT_FAULT says
// (common/storage/fault_injection_env.h; null and *status set when the
// variable is malformed).
shardps::Env* WritingEnv(absl::Status* status) {
  static auto* const faults =
      new auto(shardps::CheckpointFaultEnvFromEnvironment(
          shardps::Env::Default(),
          [](const char* name) { return std::getenv(name); }));
  if (!faults->ok()) {
    *status = faults->status();
    return nullptr;
  }
  if (**faults != nullptr) return (*faults)->get();
  return shardps::Env::Default();
}

int Reshard() {
  if (FLAGS_to.empty() || FLAGS_pservers < 1) {
    std::cerr << "ps_checkpoint reshard: needs --to and --pservers >= 1\n"
              << "usage: " << kUsage << "\n";
    return 2;
  }
  absl::Status armed;
  shardps::Env* env = WritingEnv(&armed);
  if (env == nullptr) return Fail(armed);
  const absl::Time t0 = absl::Now();
  auto from =
      shardps::FindJobCheckpoint(env, FLAGS_from, FLAGS_job_id, FLAGS_step);
  if (!from.ok()) return Fail(from.status());
  std::cout << absl::StrFormat(
      "resharding job %s, step %d, from %d pserver(s) to %d\n", FLAGS_job_id,
      from->step, from->num_servers, FLAGS_pservers);
  auto progress = [](absl::string_view line) {
    std::cout << "  " << line << std::endl;
  };
  auto out =
      shardps::ReshardJob(env, *from, FLAGS_to, FLAGS_pservers, progress);
  if (!out.ok()) return Fail(out.status());
  int64_t bytes = 0;
  for (const shardps::ShardCheckpoint& s : out->shards) bytes += s.bytes;
  std::cout << absl::StrFormat(
      "wrote %s: %d pserver(s), %.1f MB, in %.2f s; job manifest %s\n",
      FLAGS_to, out->num_servers, bytes / 1e6,
      absl::ToDoubleSeconds(absl::Now() - t0), out->manifest_path);
  std::cout << "start pserver i with --checkpoint_dir=" << FLAGS_to
            << "/pserver-<i>, and the trainers with those " << out->num_servers
            << " pservers in that order\n";
  return 0;
}

int Export() {
  if (FLAGS_out.empty()) {
    std::cerr << "ps_checkpoint export: needs --out\nusage: " << kUsage << "\n";
    return 2;
  }
  shardps::Env* env = shardps::Env::Default();
  shardps::ExportOptions options;
  options.fp16 = FLAGS_fp16;
  if (!FLAGS_config.empty()) {
    absl::Status s = env->ReadFileToString(FLAGS_config, &options.config_text);
    if (!s.ok()) return Fail(s);
  }
  const absl::Time t0 = absl::Now();
  auto from =
      shardps::FindJobCheckpoint(env, FLAGS_from, FLAGS_job_id, FLAGS_step);
  if (!from.ok()) return Fail(from.status());
  std::cout << absl::StrFormat(
      "exporting job %s, step %d, from %d pserver(s)\n", FLAGS_job_id,
      from->step, from->num_servers);
  auto progress = [](absl::string_view line) {
    std::cout << "  " << line << std::endl;
  };
  auto summary = shardps::ExportModel(env, *from, FLAGS_out, options, progress);
  if (!summary.ok()) return Fail(summary.status());
  std::cout << absl::StrFormat(
      "wrote %s: %d dense table(s), %d values; %d sparse table(s), %d rows%s; "
      "in %.2f s\n",
      FLAGS_out, summary->dense_tables, summary->dense_values,
      summary->sparse_tables, summary->sparse_rows,
      FLAGS_fp16 ? " (float16)" : "", absl::ToDoubleSeconds(absl::Now() - t0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(kUsage);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  google::InitGoogleLogging(argv[0]);
  if (argc != 2 || FLAGS_from.empty()) {
    std::cerr << "usage: " << kUsage << "\n";
    return 2;
  }
  const std::string command = argv[1];
  if (command == "info") return Info();
  if (command == "reshard") return Reshard();
  if (command == "export") return Export();
  std::cerr << "ps_checkpoint: unknown command '" << command
            << "'\nusage: " << kUsage << "\n";
  return 2;
}
