// memory_latency: what one dependent random memory access costs on this machine.
//
// The in-memory store's decisions on millions of random keys are bound by memory latency (each
// decision reads one random table slot), so its figures only make sense next to this one:
// a pointer chase through a shuffled cycle over a buffer as large as the store's tables.
//
//   memory_latency [MiB=256]

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const size_t n = (mib << 20) / sizeof(size_t);
  if (n < 2) return 2;
  void* memory =
      mmap(nullptr, n * sizeof(size_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return 1;
  auto* next = static_cast<size_t*>(memory);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  for (size_t i = 0; i < n; ++i) next[order[i]] = order[(i + 1) % n];
  constexpr int kSteps = 10'000'000;
  size_t p = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kSteps; ++i) p = next[p];
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"buffer_mib\":%zu,\"ns_per_dependent_access\":%.1f,\"checksum\":%zu}\n", mib,
              ns / kSteps, p);
  return 0;
}
