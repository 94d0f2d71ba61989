#ifndef SHARDPS_BASE_STATUS_MACROS_H_
#define SHARDPS_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Debian's abseil (20220623) has no status_macros.h; these are ours.

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status _ps_status = (expr);      \
    if (!_ps_status.ok()) return _ps_status; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>),
// returns its status if not OK, else moves the value into `lhs`.
#define ASSIGN_OR_RETURN(lhs, expr)                                          \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(_ps_statusor_, __LINE__), lhs, \
                            expr)

#define PS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

#endif  // SHARDPS_BASE_STATUS_MACROS_H_
