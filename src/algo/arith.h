// Exact integer helpers for the algorithms: 128-bit intermediates, rounding up.
//
// The algorithms keep time in integer microseconds but rates are rarely whole microseconds
// (7 per minute is one every 8571428.57 µs), so they compute in time scaled by N, where every
// emission interval is exact. Products of scaled times need more than 64 bits; these helpers
// keep the common case (values that fit in 64 bits) on cheap 64-bit division.

#ifndef SLUICE_ALGO_ARITH_H_
#define SLUICE_ALGO_ARITH_H_

#include <cstdint>

namespace sluice::algo {

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

// ceil(a / b) for a >= 0, b > 0.
inline i128 CeilDiv(i128 a, i128 b) {
  if ((static_cast<u128>(a) >> 64) == 0 && (static_cast<u128>(b) >> 64) == 0) {
    const uint64_t a64 = static_cast<uint64_t>(a), b64 = static_cast<uint64_t>(b);
    return a64 / b64 + (a64 % b64 != 0);
  }
  return a / b + (a % b != 0);
}

// floor(a / b) for a >= 0, b > 0.
inline i128 FloorDiv(i128 a, i128 b) {
  if ((static_cast<u128>(a) >> 64) == 0 && (static_cast<u128>(b) >> 64) == 0) {
    return static_cast<uint64_t>(a) / static_cast<uint64_t>(b);
  }
  return a / b;
}

inline i128 Max(i128 a, i128 b) { return a > b ? a : b; }

// Start of the epoch-aligned window of length window_us that holds now_us (now_us >= 0).
inline int64_t WindowStart(int64_t now_us, int64_t window_us) {
  return now_us - now_us % window_us;
}

}  // namespace sluice::algo

#endif  // SLUICE_ALGO_ARITH_H_
