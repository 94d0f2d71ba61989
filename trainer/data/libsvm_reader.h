#ifndef SHARDPS_TRAINER_DATA_LIBSVM_READER_H_
#define SHARDPS_TRAINER_DATA_LIBSVM_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/data/distinct_counter.h"

// Readers for libsvm / svmlight text files, gzip-compressed or plain:
//
//   <label> <id>:<value> <id>:<value> ...   # optional comment
//
// The label is 0, 1, -1 or +1 (any float without `binary_labels`); ids are
// unsigned 64-bit integers (the whole range: hashed CTR features spread over
// 2^40 and beyond are fine) in any order; values are finite floats. Tokens are
// separated by spaces or tabs; `qid:<n>` tokens are skipped; everything from a
// `#` to the end of the line is a comment; blank and comment-only lines hold no
// record. Duplicate ids within a record are kept as written.
//
// Sharding follows data_shard.h: by file (FilesForTrainer on files named
// `name-00003`), or by record (record r of the data set to trainer r mod N:
// LibsvmReadOptions::shard_index / num_shards while reading, or
// SelectSparseRecords on a set already read; RecordsPerTrainer with
// CountLibsvmRecords gives the counts without reading the features).
//
// Thread-safe: the functions keep no state.

namespace shardps {

// Records of a sparse data set in CSR form, in file order. Record r has the
// features ids[offsets[r] .. offsets[r + 1]) with the same `values`.
struct SparseData {
  int64_t num_records = 0;
  std::vector<int64_t> offsets{0};  // num_records + 1; offsets[0] == 0
  std::vector<uint64_t> ids;        // offsets.back() feature ids
  std::vector<float> values;        // offsets.back() feature values
  std::vector<int32_t> labels;      // num_records; 0 or 1 (raw label > 0)
  std::vector<float> raw_labels;    // num_records; the label as written
};

struct LibsvmReadOptions {
  // When true (the default) a label must be 0, 1, -1 or +1 (written in any
  // float form: "+1", "1.0"); anything else is InvalidArgument. When false
  // any finite float is accepted. Either way labels[r] = raw_label > 0.
  bool binary_labels = true;

  // Record sharding: keep only records r with r % num_shards == shard_index,
  // counting records from 0 over all the files read, in order. Every line is
  // still parsed and checked, so all shards of a job fail on the same bad
  // line. Default: one shard, every record.
  int shard_index = 0;
  int num_shards = 1;
};

// Reads `path` (gzip or plain). Errors name the file and, for its contents,
// the 1-based line number and the offending token: NotFound for a missing
// file, PermissionDenied for an unreadable one, InvalidArgument for a
// malformed label or feature, DataLoss for a truncated or corrupt gzip
// stream, InvalidArgument for shard options outside 0 <= shard_index <
// num_shards.
absl::StatusOr<SparseData> ReadLibsvm(const std::string& path,
                                      const LibsvmReadOptions& options = {});

// Reads `paths` in order into one data set (record numbering for sharding
// continues across files). Same errors as ReadLibsvm.
absl::StatusOr<SparseData> ReadLibsvmFiles(
    const std::vector<std::string>& paths,
    const LibsvmReadOptions& options = {});

// What scans of libsvm files tell without storing them.
struct LibsvmSummary {
  int64_t records = 0;    // lines that are neither blank nor comment-only
  int64_t features = 0;   // id:value tokens (qid tokens not counted)
  int64_t positives = 0;  // records whose label reads as a number > 0
  DistinctCounter ids;    // the feature ids
};

// Adds `path` to `*summary`. Cheap: scans bytes without checking the
// tokens, so it can be less strict than ReadLibsvm (a label that is not a
// number counts as not positive). NotFound, PermissionDenied and DataLoss
// as for ReadLibsvm.
absl::Status SummarizeLibsvm(const std::string& path, LibsvmSummary* summary);

// The records of `path` (SummarizeLibsvm's count).
absl::StatusOr<int64_t> CountLibsvmRecords(const std::string& path);

// The records r of `data` with r % num_trainers == trainer_id, in order.
// InvalidArgument if trainer_id is outside [0, num_trainers) or `data` is not
// consistent CSR (sizes and monotone offsets).
absl::StatusOr<SparseData> SelectSparseRecords(const SparseData& data,
                                               int trainer_id,
                                               int num_trainers);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_LIBSVM_READER_H_
