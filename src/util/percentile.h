// The p-quantile of a sample (nearest rank, no interpolation), for the figures the tools report.

#ifndef SLUICE_UTIL_PERCENTILE_H_
#define SLUICE_UTIL_PERCENTILE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::util {

// The sample at rank floor(p × n) (the largest for p >= 1), 0 for none. Reorders `samples`.
template <typename T>
int64_t Percentile(std::vector<T>& samples, double p) {
  if (samples.empty()) return 0;
  const size_t k =
      std::min(samples.size() - 1, static_cast<size_t>(p * static_cast<double>(samples.size())));
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(k),
                   samples.end());
  return static_cast<int64_t>(samples[k]);
}

}  // namespace sluice::util

#endif  // SLUICE_UTIL_PERCENTILE_H_
