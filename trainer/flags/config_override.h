#ifndef SHARDPS_TRAINER_FLAGS_CONFIG_OVERRIDE_H_
#define SHARDPS_TRAINER_FLAGS_CONFIG_OVERRIDE_H_

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace shardps {

// Sets fields of a config from "path=value" assignments, comma-separated,
// as the trainer's --config_set takes them (a sweep's trials differ only in
// their flags, so no config file needs to be written per trial):
//
//   optimizer.learning_rate=0.1,layers[fc1].output_dim=512,
//   optimizer.type=ADAGRAD,data.scale=0.5
//
// A path is field names joined by '.'; a repeated message field takes an
// index, [0] or [-1] (the last), or the value of the element's `name`
// field, [fc1]. A message field that is not set is created. Values: numbers
// (checked against the field's range), true/false, an enum value's name
// (or number), or a string. Values cannot hold commas. Every error is
// INVALID_ARGUMENT and names the assignment. Applied in order; on an error
// the message may be partly changed.
absl::Status ApplyConfigSet(const std::string& assignments,
                            google::protobuf::Message* config);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_FLAGS_CONFIG_OVERRIDE_H_
