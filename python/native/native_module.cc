// shardps._native: the Python package's view of a TrainingSession over
// gRPC (python/shardps/job.py wraps it). A session is made from trainer
// flags, parsed exactly as the trainer binary parses them (with SHARDPS_*,
// the schedulers' and torchrun's variables), so defaults, checks and
// messages are the binary's. Tensors cross as addresses of contiguous
// float32 (int64 for keys) host memory, which the Python side checks and
// keeps alive. Every call that may wait releases the GIL. A failed status
// raises the exception class that python/shardps/errors.py registers for
// its code, with the same message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/launch/flags.h"
#include "common/monitoring/monitoring.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "google/protobuf/text_format.h"
#include "trainer/core/training_session.h"
#include "trainer/flags/flags.h"
#include "trainer/flags/grpc_launch.h"
#include "trainer/model/model.h"
#include "trainer/monitoring/trainer_monitoring.h"

namespace py = pybind11;

namespace shardps {
namespace {

// A failed absl::Status, thrown through pybind11 to the translator.
struct StatusException {
  absl::Status status;
};

// code name -> Python exception class, set by shardps.errors at import.
py::dict& ErrorClasses() {
  static py::dict* classes = new py::dict();
  return *classes;
}

void Check(const absl::Status& s) {
  if (!s.ok()) throw StatusException{s};
}

template <typename T>
T Value(absl::StatusOr<T> v) {
  Check(v.status());
  return *std::move(v);
}

template <typename Message>
Message ParseText(const std::string& text, const char* what) {
  Message m;
  if (!google::protobuf::TextFormat::ParseFromString(text, &m)) {
    Check(absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, ": '", text, "'")));
  }
  return m;
}

template <typename T>
std::vector<T*> Pointers(const std::vector<uintptr_t>& addresses) {
  std::vector<T*> out;
  for (uintptr_t a : addresses) out.push_back(reinterpret_cast<T*>(a));
  return out;
}

// A session with its connections and monitoring, made from trainer flags.
class NativeSession {
 public:
  explicit NativeSession(const std::vector<std::string>& args) {
    static bool logging = [] {
      FLAGS_logtostderr = true;
      google::InitGoogleLogging("shardps");
      return true;
    }();
    (void)logging;
    // The flags are process-wide: read, then put back, so that another
    // session starts from the defaults.
    gflags::FlagSaver saver;
    std::vector<std::string> argv_store = {"shardps"};
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_store) argv.push_back(a.data());
    int argc = static_cast<int>(argv.size());
    char** p = argv.data();
    TrainerLaunch launch =
        Value(ParseTrainerFlags(&argc, &p, ProcessEnv(), ModelSource::kCaller));
    auto m = MonitoringOptionsFromFlags("0.0.0.0");
    Check(m.status());
    const TransportSecurity& tls = launch.connection.security;
    Check(m->UseTls(tls.tls_cert_pem, tls.tls_key_pem, tls.tls_ca_pem));
    if (m->port >= 0) {
      metrics_ = std::make_unique<TrainerMetrics>(launch.connection.job_id,
                                                  launch.options.trainer_id);
      monitoring_ = Value(MonitoringServer::Start(*m, {metrics_->registry()}));
      launch.options.observer = metrics_.get();
    }
    conn_ = ConnectTrainer(&launch);
    options_ = launch.options;
    connection_ = launch.connection;
    session_ = std::make_unique<TrainingSession>(options_, conn_->servers);
  }
  ~NativeSession() {
    py::gil_scoped_release release;
    session_.reset();
  }

  TrainingSession& s() { return *session_; }
  const TrainerOptions& options() const { return options_; }
  const ConnectionOptions& connection() const { return connection_; }
  int monitoring_port() const {
    return monitoring_ != nullptr ? monitoring_->port() : -1;
  }

 private:
  TrainerOptions options_;
  ConnectionOptions connection_;
  std::unique_ptr<TrainerMetrics> metrics_;
  std::unique_ptr<MonitoringServer> monitoring_;
  std::unique_ptr<PserverConnections> conn_;
  std::unique_ptr<TrainingSession> session_;
};

// What a session is: its flags, as parsed, and where it stands.
void BindProperties(py::class_<NativeSession>& c) {
  c.def(py::init<const std::vector<std::string>&>(), py::arg("args"))
      .def_property_readonly(
          "trainer_id", [](NativeSession& n) { return n.options().trainer_id; })
      .def_property_readonly(
          "num_trainers",
          [](NativeSession& n) { return n.options().num_trainers; })
      .def_property_readonly("mode",
                             [](NativeSession& n) {
                               return n.options().mode == SYNC ? "sync"
                                                               : "async";
                             })
      .def_property_readonly(
          "batch_size", [](NativeSession& n) { return n.options().batch_size; })
      .def_property_readonly(
          "num_passes", [](NativeSession& n) { return n.options().num_passes; })
      .def_property_readonly(
          "max_steps", [](NativeSession& n) { return n.options().max_steps; })
      .def_property_readonly(
          "pservers", [](NativeSession& n) { return n.connection().addresses; })
      .def_property_readonly(
          "job_id", [](NativeSession& n) { return n.connection().job_id; })
      .def_property_readonly("monitoring_port", &NativeSession::monitoring_port)
      .def_property_readonly("step",
                             [](NativeSession& n) { return n.s().step(); })
      .def_property_readonly(
          "push_bytes", [](NativeSession& n) { return n.s().push_bytes(); })
      .def_property_readonly(
          "pull_bytes", [](NativeSession& n) { return n.s().pull_bytes(); })
      .def_property_readonly("shared_memory_servers", [](NativeSession& n) {
        return n.s().shared_memory_servers();
      });
}

// What a session does before its steps: tables, start.
void BindCalls(py::class_<NativeSession>& c) {
  c.def("add_dense_table",
        [](NativeSession& n, const std::string& name,
           const std::vector<int64_t>& shape, const std::string& opt) {
          return Value(n.s().AddDenseTable(
              name, shape,
              ParseText<OptimizerConfig>(opt, "the optimizer config")));
        })
      .def("add_sparse_table",
           [](NativeSession& n, const std::string& name,
              const std::string& sparse, const std::string& opt) {
             return Value(n.s().AddSparseTable(
                 name,
                 ParseText<SparseTableOptions>(sparse, "the sparse options"),
                 ParseText<OptimizerConfig>(opt, "the optimizer config")));
           })
      .def("start", [](NativeSession& n, const std::vector<uintptr_t>& initial,
                       int64_t steps_per_pass) {
        const std::vector<const float*> p = Pointers<const float>(initial);
        absl::Status s;
        {
          py::gil_scoped_release release;
          s = n.s().Start(p, steps_per_pass);
        }
        Check(s);
      });
}

// Ends the step (TrainingSession::EndStep): `next_rows` holds (sparse
// table, keys address, key count, rows address) of the next step's rows.
py::tuple EndStep(
    NativeSession& n, const std::vector<uintptr_t>& grads,
    std::optional<std::vector<uintptr_t>> next,
    const std::vector<std::tuple<int, uintptr_t, size_t, uintptr_t>>& next_rows,
    double loss_sum, int64_t samples) {
  const std::vector<const float*> g = Pointers<const float>(grads);
  std::vector<float*> v;
  if (next.has_value()) v = Pointers<float>(*next);
  std::vector<SparseFetch> fetch;
  for (const auto& [table, keys, count, rows] : next_rows) {
    fetch.push_back(SparseFetch{
        table,
        absl::MakeConstSpan(reinterpret_cast<const uint64_t*>(keys), count),
        reinterpret_cast<float*>(rows)});
  }
  absl::StatusOr<StepOutcome> out;
  {
    py::gil_scoped_release release;
    out = n.s().EndStep(g, next.has_value() ? &v : nullptr,
                        fetch.empty() ? nullptr : &fetch, loss_sum, samples);
  }
  const StepOutcome o = Value(std::move(out));
  return py::make_tuple(o.step, o.recovered);
}

// The distinct values of ids[0, count) in the order they first appear,
// into unique; inverse[i] is the position of ids[i] among them. Returns
// how many there are. A hash table: no sort, unlike torch.unique.
int64_t UniqueIds(uintptr_t ids_address, int64_t count,
                  uintptr_t unique_address, uintptr_t inverse_address) {
  const int64_t* ids = reinterpret_cast<const int64_t*>(ids_address);
  int64_t* unique = reinterpret_cast<int64_t*>(unique_address);
  int64_t* inverse = reinterpret_cast<int64_t*>(inverse_address);
  absl::flat_hash_map<int64_t, int64_t> seen;
  seen.reserve(static_cast<size_t>(count));
  int64_t n = 0;
  for (int64_t i = 0; i < count; ++i) {
    auto [it, fresh] = seen.try_emplace(ids[i], n);
    if (fresh) unique[n++] = ids[i];
    inverse[i] = it->second;
  }
  return n;
}

// A step: pulls, pushes, its end.
void BindSteps(py::class_<NativeSession>& c) {
  c.def("pull_dense",
        [](NativeSession& n, const std::vector<uintptr_t>& values) {
          const std::vector<float*> p = Pointers<float>(values);
          absl::Status s;
          {
            py::gil_scoped_release release;
            s = n.s().PullDense(p);
          }
          Check(s);
        })
      .def("pull_sparse",
           [](NativeSession& n, int table, uintptr_t keys, size_t count,
              uintptr_t rows) {
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = n.s().PullSparse(
                   table,
                   absl::MakeConstSpan(reinterpret_cast<const uint64_t*>(keys),
                                       count),
                   reinterpret_cast<float*>(rows));
             }
             Check(s);
           })
      .def("push_sparse",
           [](NativeSession& n, int table, uintptr_t keys, size_t count,
              uintptr_t grads, size_t values) {
             Check(n.s().PushSparse(
                 table,
                 absl::MakeConstSpan(reinterpret_cast<const uint64_t*>(keys),
                                     count),
                 absl::MakeConstSpan(reinterpret_cast<const float*>(grads),
                                     values)));
           })
      .def("push_dense_early",
           [](NativeSession& n, int table, uintptr_t grad) {
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = n.s().PushDenseEarly(table,
                                        reinterpret_cast<const float*>(grad));
             }
             Check(s);
           })
      .def("end_step", &EndStep, py::arg("grads"), py::arg("next_values"),
           py::arg("next_rows"), py::arg("loss_sum"), py::arg("samples"));
}

// The end of a job: evaluations, the saved model, leaving.
void BindEnd(py::class_<NativeSession>& c) {
  c.def("evaluated",
        [](NativeSession& n, int pass, bool final, double loss, double accuracy,
           std::optional<double> auc) {
          shardps::Evaluation e;
          e.pass = pass;
          e.final = final;
          e.loss = loss;
          e.accuracy = accuracy;
          e.auc = auc.value_or(std::nan(""));
          n.s().Evaluated(e);
        })
      .def("save",
           [](NativeSession& n, const std::vector<uintptr_t>& values) {
             const std::vector<const float*> p = Pointers<const float>(values);
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = n.s().Save(p);
             }
             Check(s);
           })
      .def("finish",
           [](NativeSession& n) {
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = n.s().Finish();
             }
             Check(s);
           })
      .def("abandon", [](NativeSession& n) {
        py::gil_scoped_release release;
        n.s().Abandon();
      });
}

// The trainer binary's initial values of the model in `config_path` (its
// seed, 1 when unset): name -> (shape, float32 bytes), e.g. "fc1.weight"
// of shape [in, out].
py::dict InitialValues(const std::string& config_path, int input_dim,
                       int num_classes) {
  ModelConfig config = Value(ReadModelConfig(config_path));
  std::unique_ptr<Model> model =
      Value(Model::Create(config, input_dim, num_classes));
  model->InitializeParameters(config.seed() != 0 ? config.seed() : 1);
  py::dict out;
  for (const ParamTable& t : model->tables()) {
    out[py::str(t.name)] = py::make_tuple(
        t.shape, py::bytes(reinterpret_cast<const char*>(t.value.data()),
                           t.value.size() * sizeof(float)));
  }
  return out;
}

}  // namespace
}  // namespace shardps

PYBIND11_MODULE(_native, m) {
  m.doc() = "ShardPS's C++ trainer client (python/shardps wraps it)";
  m.def(
      "set_error_classes",
      [](py::dict classes) { shardps::ErrorClasses() = classes; },
      "code name -> exception class, for failed statuses");
  m.def("unique_ids", &shardps::UniqueIds, py::arg("ids"), py::arg("count"),
        py::arg("unique"), py::arg("inverse"),
        "distinct int64 ids in first-seen order, and where each id is");
  m.def("initial_values", &shardps::InitialValues, py::arg("config"),
        py::arg("input_dim"), py::arg("num_classes"),
        "the trainer binary's initial values of a model config");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const shardps::StatusException& e) {
      const std::string code(absl::StatusCodeToString(e.status.code()));
      py::dict& classes = shardps::ErrorClasses();
      py::object cls =
          classes.contains(code.c_str())
              ? classes[code.c_str()]
              : py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
      py::object err = cls(code, std::string(e.status.message()));
      PyErr_SetObject(cls.ptr(), err.ptr());
    }
  });
  py::class_<shardps::NativeSession> session(m, "Session");
  shardps::BindProperties(session);
  shardps::BindCalls(session);
  shardps::BindSteps(session);
  shardps::BindEnd(session);
}
