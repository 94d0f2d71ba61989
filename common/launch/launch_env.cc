#include "common/launch/launch_env.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gflags/gflags.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace shardps {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status Bad(absl::string_view var, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(var, ": ", why));
}

// TF_CONFIG as read: the task lists by type, and this task.
struct TfConfig {
  std::vector<std::string> chief, worker, ps;
  std::string task_type;
  int task_index = -1;
};

absl::StatusOr<std::vector<std::string>> StringList(const Struct& cluster,
                                                    const std::string& type) {
  std::vector<std::string> out;
  auto it = cluster.fields().find(type);
  if (it == cluster.fields().end()) return out;
  if (it->second.kind_case() != Value::kListValue) {
    return Bad("TF_CONFIG", absl::StrCat("cluster.", type, " is not a list"));
  }
  for (const Value& v : it->second.list_value().values()) {
    if (v.kind_case() != Value::kStringValue || v.string_value().empty()) {
      return Bad("TF_CONFIG",
                 absl::StrCat("cluster.", type, " holds a non-address"));
    }
    out.push_back(v.string_value());
  }
  return out;
}

// Reads TF_CONFIG; nullopt when it is unset or empty.
absl::StatusOr<std::optional<TfConfig>> ReadTfConfig(const GetEnvFn& env) {
  const char* text = env("TF_CONFIG");
  if (text == nullptr || absl::StripAsciiWhitespace(text).empty()) {
    return std::optional<TfConfig>();
  }
  Struct root;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(text, &root, options).ok()) {
    return Bad("TF_CONFIG", "not a JSON object");
  }
  TfConfig c;
  auto cluster = root.fields().find("cluster");
  if (cluster != root.fields().end()) {
    if (cluster->second.kind_case() != Value::kStructValue) {
      return Bad("TF_CONFIG", "cluster is not an object");
    }
    const Struct& s = cluster->second.struct_value();
    auto chief = StringList(s, "chief");
    if (!chief.ok()) return chief.status();
    auto master = StringList(s, "master");  // TFJob's older name of chief
    if (!master.ok()) return master.status();
    auto worker = StringList(s, "worker");
    if (!worker.ok()) return worker.status();
    auto ps = StringList(s, "ps");
    if (!ps.ok()) return ps.status();
    c.chief = *chief;
    c.chief.insert(c.chief.end(), master->begin(), master->end());
    c.worker = *worker;
    c.ps = *ps;
  }
  auto task = root.fields().find("task");
  if (task != root.fields().end()) {
    if (task->second.kind_case() != Value::kStructValue) {
      return Bad("TF_CONFIG", "task is not an object");
    }
    const auto& f = task->second.struct_value().fields();
    auto type = f.find("type");
    if (type != f.end()) c.task_type = type->second.string_value();
    if (c.task_type == "master") c.task_type = "chief";
    auto index = f.find("index");
    if (index != f.end()) {
      const double i = index->second.number_value();
      if (index->second.kind_case() != Value::kNumberValue || i < 0 ||
          i != static_cast<int>(i)) {
        return Bad("TF_CONFIG", "task.index is not a non-negative integer");
      }
      c.task_index = static_cast<int>(i);
    }
  }
  return std::optional<TfConfig>(std::move(c));
}

absl::StatusOr<int> PositiveInt(const GetEnvFn& env, const char* var, int min) {
  const char* v = env(var);
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < min) {
    return Bad(var, absl::StrCat("'", v, "' is not an integer >= ", min));
  }
  return n;
}

// TF_CONFIG's port of ps task `index`.
absl::StatusOr<std::string> PsPort(const TfConfig& c) {
  if (c.task_index < 0 || c.task_index >= static_cast<int>(c.ps.size())) {
    return Bad("TF_CONFIG",
               absl::StrCat("task ps ", c.task_index, " is not in cluster.ps"));
  }
  const std::string& addr = c.ps[c.task_index];
  const size_t colon = addr.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return Bad("TF_CONFIG",
               absl::StrCat("cluster.ps entry '", addr, "' has no port"));
  }
  return absl::StrCat(port);
}

absl::Status TfConfigAliases(const TfConfig& c, LaunchRole role,
                             std::vector<FlagAlias>* out) {
  if (role == LaunchRole::kTrainer) {
    if (!c.ps.empty()) {
      out->push_back({"pservers", absl::StrJoin(c.ps, ","), "TF_CONFIG"});
    }
    return absl::OkStatus();
  }
  if (c.task_type != "ps") return absl::OkStatus();
  auto port = PsPort(c);
  if (!port.ok()) return port.status();
  out->push_back({"port", *port, "TF_CONFIG"});
  const size_t trainers = c.chief.size() + c.worker.size();
  if (trainers > 0) {
    out->push_back(
        {"num_gradient_servers", absl::StrCat(trainers), "TF_CONFIG"});
  }
  return absl::OkStatus();
}

absl::Status PaddleAliases(const GetEnvFn& env, LaunchRole role,
                           std::vector<FlagAlias>* out) {
  std::optional<int> port;
  if (env("PADDLE_INIT_PORT") != nullptr) {
    auto p = PositiveInt(env, "PADDLE_INIT_PORT", 1);
    if (!p.ok()) return p.status();
    if (*p > 65535) return Bad("PADDLE_INIT_PORT", "not a port");
    port = *p;
  }
  if (role == LaunchRole::kPserver) {
    if (port) {
      out->push_back({"port", absl::StrCat(*port), "PADDLE_INIT_PORT"});
    }
    if (env("PADDLE_INIT_NUM_GRADIENT_SERVERS") != nullptr) {
      auto n = PositiveInt(env, "PADDLE_INIT_NUM_GRADIENT_SERVERS", 1);
      if (!n.ok()) return n.status();
      out->push_back({"num_gradient_servers", absl::StrCat(*n),
                      "PADDLE_INIT_NUM_GRADIENT_SERVERS"});
    }
    return absl::OkStatus();
  }
  if (const char* ps = env("PADDLE_INIT_PSERVERS")) {
    std::vector<std::string> addrs;
    for (absl::string_view ip :
         absl::StrSplit(ps, ',', absl::SkipWhitespace())) {
      ip = absl::StripAsciiWhitespace(ip);
      addrs.push_back(port ? absl::StrCat(ip, ":", *port) : std::string(ip));
    }
    if (!addrs.empty()) {
      out->push_back(
          {"pservers", absl::StrJoin(addrs, ","), "PADDLE_INIT_PSERVERS"});
    }
  }
  if (const char* gpu = env("PADDLE_INIT_USE_GPU")) {
    const std::string v = absl::AsciiStrToLower(gpu);
    const bool on = v == "1" || v == "true";
    if (!on && v != "0" && v != "false") {
      return Bad("PADDLE_INIT_USE_GPU", "must be 0, 1, true or false");
    }
    out->push_back({"use_gpu", on ? "true" : "false", "PADDLE_INIT_USE_GPU"});
  }
  if (env("PADDLE_INIT_TRAINER_COUNT") != nullptr) {
    auto n = PositiveInt(env, "PADDLE_INIT_TRAINER_COUNT", 1);
    if (!n.ok()) return n.status();
    out->push_back(
        {"num_threads", absl::StrCat(*n), "PADDLE_INIT_TRAINER_COUNT"});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<FlagAlias>> LaunchAliases(const GetEnvFn& env,
                                                     LaunchRole role) {
  std::vector<FlagAlias> out;
  auto tf = ReadTfConfig(env);
  if (!tf.ok()) return tf.status();
  // TF_CONFIG first: of two sources for one flag, the first is applied.
  if (tf->has_value()) {
    absl::Status s = TfConfigAliases(**tf, role, &out);
    if (!s.ok()) return s;
  }
  absl::Status s = PaddleAliases(env, role, &out);
  if (!s.ok()) return s;
  return out;
}

absl::Status LaunchRank(const GetEnvFn& env, SchedulerRank* out) {
  *out = SchedulerRank{};
  auto tf = ReadTfConfig(env);
  if (!tf.ok()) return tf.status();
  if (tf->has_value() && !(*tf)->task_type.empty()) {
    const TfConfig& c = **tf;
    // The chief (if any) is trainer 0, the workers follow it.
    const int chiefs = static_cast<int>(c.chief.size());
    if (c.task_type == "chief") {
      out->rank = c.task_index < 0 ? 0 : c.task_index;
    } else if (c.task_type == "worker") {
      out->rank = chiefs + (c.task_index < 0 ? 0 : c.task_index);
    } else {
      return Bad("TF_CONFIG",
                 absl::StrCat("task type '", c.task_type,
                              "' is no trainer (chief or worker)"));
    }
    const int n = chiefs + static_cast<int>(c.worker.size());
    if (n > 0) out->size = n;
    out->source = "TF_CONFIG";
    return absl::OkStatus();
  }
  if (env("PADDLE_INIT_TRAINER_ID") != nullptr) {
    auto id = PositiveInt(env, "PADDLE_INIT_TRAINER_ID", 0);
    if (!id.ok()) return id.status();
    out->rank = *id;
    out->source = "PADDLE_INIT_TRAINER_ID";
  }
  if (env("PADDLE_INIT_NUM_GRADIENT_SERVERS") != nullptr) {
    auto n = PositiveInt(env, "PADDLE_INIT_NUM_GRADIENT_SERVERS", 1);
    if (!n.ok()) return n.status();
    out->size = *n;
    if (out->source.empty()) out->source = "PADDLE_INIT_NUM_GRADIENT_SERVERS";
  }
  return absl::OkStatus();
}

absl::Status ApplyFlagAliases(const std::vector<FlagAlias>& aliases) {
  for (const FlagAlias& a : aliases) {
    if (FlagWasSet(a.flag)) continue;  // command line, SHARDPS_, or earlier
    if (gflags::SetCommandLineOption(a.flag.c_str(), a.value.c_str()).empty()) {
      return Bad(
          a.source,
          absl::StrCat("'", a.value, "' is not a valid value for --", a.flag));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardps
