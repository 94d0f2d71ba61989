#include "trainer/model/auc.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace shardps {
namespace {

// A strict weak order on floats with NaN below everything.
bool ScoreLess(float a, float b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return a < b;
}

}  // namespace

double Auc(absl::Span<const float> scores, absl::Span<const int32_t> labels) {
  assert(scores.size() == labels.size());
  const size_t n = std::min(scores.size(), labels.size());
  std::vector<std::pair<float, bool>> sorted(n);
  for (size_t i = 0; i < n; ++i) sorted[i] = {scores[i], labels[i] != 0};
  std::sort(
      sorted.begin(), sorted.end(),
      [](const std::pair<float, bool>& a, const std::pair<float, bool>& b) {
        return ScoreLess(a.first, b.first);
      });
  // Walk groups of tied scores upwards. A positive in a group beats every
  // negative below the group and half of the negatives in it.
  double u = 0;
  int64_t negatives_below = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    int64_t group_pos = 0;
    int64_t group_neg = 0;
    while (j < n && !ScoreLess(sorted[i].first, sorted[j].first)) {
      if (sorted[j].second) {
        ++group_pos;
      } else {
        ++group_neg;
      }
      ++j;
    }
    u += static_cast<double>(group_pos) *
         (static_cast<double>(negatives_below) + 0.5 * group_neg);
    negatives_below += group_neg;
    positives += group_pos;
    i = j;
  }
  if (positives == 0 || negatives_below == 0) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return u / (static_cast<double>(positives) *
              static_cast<double>(negatives_below));
}

double LogLoss(absl::Span<const float> probs,
               absl::Span<const int32_t> labels) {
  assert(probs.size() == labels.size());
  const size_t n = std::min(probs.size(), labels.size());
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  constexpr double kEps = 1e-7;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = probs[i];
    if (std::isnan(p)) return std::numeric_limits<double>::quiet_NaN();
    const double q = std::clamp(p, kEps, 1.0 - kEps);
    sum -= labels[i] != 0 ? std::log(q) : std::log1p(-q);
  }
  return sum / static_cast<double>(n);
}

}  // namespace shardps
