// Test helpers over a text exposition (registry_test.cc, server_metrics_test.cc).

#ifndef SLUICE_METRICS_EXPOSITION_TESTING_H_
#define SLUICE_METRICS_EXPOSITION_TESTING_H_

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::metrics {

// Every series of an exposition ("name{labels}", i.e. the line without its value), in order.
inline std::vector<std::string> SeriesOf(const std::string& text) {
  std::vector<std::string> series;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    series.push_back(line.substr(0, line.rfind(' ')));
  }
  return series;
}

inline void ExpectUniqueSeries(const std::string& text) {
  const std::vector<std::string> series = SeriesOf(text);
  const std::set<std::string> unique(series.begin(), series.end());
  EXPECT_EQ(unique.size(), series.size()) << text;
}

}  // namespace sluice::metrics

#endif  // SLUICE_METRICS_EXPOSITION_TESTING_H_
