// PooledAllocator: a stateless allocator that keeps freed blocks of a few sizes (64 to 512
// bytes) on free lists of the thread that freed them, for the field set of every request the
// server parses (HttpRequest's HttpFields): cheaper than glibc malloc and free per request.
//
// Thread safety: every PooledAllocator is equal to every other and holds nothing; the lists are
// per thread, so there is no locking, and a block may be freed on another thread than the one it
// came from. Bounded: kMaxFreeBlocks per class and thread.
//
// Design: docs/http-server.md#pooled-field-allocator (size classes, alignment, thread exit).

#ifndef SLUICE_HTTP_TRANSPORT_POOLED_ALLOCATOR_H_
#define SLUICE_HTTP_TRANSPORT_POOLED_ALLOCATOR_H_

#include <cstddef>
#include <iterator>
#include <limits>
#include <new>
#include <type_traits>

// Under AddressSanitizer a block on a free list is poisoned, so that a use after free of a
// pooled block is reported as it would be for malloc's.
#if defined(__SANITIZE_ADDRESS__)
#define SLUICE_POOLED_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLUICE_POOLED_ASAN 1
#endif
#endif
#ifdef SLUICE_POOLED_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace sluice::http {

namespace pooled_allocator_internal {

inline void Poison([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes) {
#ifdef SLUICE_POOLED_ASAN
  __asan_poison_memory_region(p, bytes);
#endif
}

inline void Unpoison([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes) {
#ifdef SLUICE_POOLED_ASAN
  __asan_unpoison_memory_region(p, bytes);
#endif
}

inline constexpr size_t kClassBytes[] = {64, 128, 256, 512};
inline constexpr size_t kClasses = std::size(kClassBytes);
inline constexpr size_t kMaxFreeBlocks = 64;  // per class and thread

// The smallest class holding `bytes`, or kClasses when none does.
constexpr size_t ClassOf(size_t bytes) {
  size_t c = 0;
  while (c < kClasses && bytes > kClassBytes[c]) ++c;
  return c;
}

struct FreeBlock {
  FreeBlock* next;
};

// One thread's lists. Trivially destructible, so it stays usable until the thread is gone, even
// after the Reaper below has run.
struct FreeLists {
  FreeBlock* head[kClasses];
  size_t length[kClasses];
  bool reaper_armed;  // this thread's Reaper exists
};

inline constinit thread_local FreeLists tls_free_lists{};

// Frees the thread's blocks when the thread ends, and fills every list to its cap so that blocks
// freed later on the thread (by another thread_local's destructor) go back to ::operator delete.
struct Reaper {
  Reaper() { tls_free_lists.reaper_armed = true; }
  ~Reaper() {
    FreeLists& lists = tls_free_lists;
    for (size_t c = 0; c < kClasses; ++c) {
      while (FreeBlock* block = lists.head[c]) {
        Unpoison(block, kClassBytes[c]);
        lists.head[c] = block->next;
        ::operator delete(block);
      }
      lists.length[c] = kMaxFreeBlocks;
    }
  }
};

inline void* Allocate(size_t bytes) {
  const size_t c = ClassOf(bytes);
  if (c == kClasses) return ::operator new(bytes);
  FreeLists& lists = tls_free_lists;
  void* p = lists.head[c];
  if (p == nullptr) {
    p = ::operator new(kClassBytes[c]);
  } else {
    Unpoison(p, sizeof(FreeBlock));
    lists.head[c] = lists.head[c]->next;
    --lists.length[c];
  }
  Unpoison(p, bytes);  // (and under ASan the rest of the class's room stays out of bounds)
  Poison(static_cast<char*>(p) + bytes, kClassBytes[c] - bytes);
  return p;
}

inline void Deallocate(void* p, size_t bytes) noexcept {
  const size_t c = ClassOf(bytes);
  if (c == kClasses) return ::operator delete(p);
  FreeLists& lists = tls_free_lists;
  Unpoison(p, kClassBytes[c]);
  if (lists.length[c] >= kMaxFreeBlocks) return ::operator delete(p);
  if (!lists.reaper_armed) {
    thread_local Reaper reaper;  // constructed once per thread, on the first block kept
  }
  lists.head[c] = ::new (p) FreeBlock{lists.head[c]};
  ++lists.length[c];
  // All but the link: LeakSanitizer does not look for pointers in poisoned memory, so a poisoned
  // link would make every block after the list's head look leaked.
  Poison(static_cast<char*>(p) + sizeof(FreeBlock), kClassBytes[c] - sizeof(FreeBlock));
}

}  // namespace pooled_allocator_internal

// The number of blocks on the calling thread's free list of the class that serves `bytes`
// (0 above the largest class). For tests.
inline size_t PooledFreeBlocks(size_t bytes) {
  const size_t c = pooled_allocator_internal::ClassOf(bytes);
  return c == pooled_allocator_internal::kClasses
             ? 0
             : pooled_allocator_internal::tls_free_lists.length[c];
}

template <class T>
class PooledAllocator {
 public:
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                "blocks are aligned as ::operator new aligns them");

  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::true_type;

  PooledAllocator() = default;
  template <class U>
  constexpr PooledAllocator(const PooledAllocator<U>&) noexcept {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(pooled_allocator_internal::Allocate(n * sizeof(T)));
  }

  // `n` as given to the allocate that returned `p`.
  void deallocate(T* p, size_t n) noexcept {
    pooled_allocator_internal::Deallocate(p, n * sizeof(T));
  }
};

template <class T, class U>
constexpr bool operator==(const PooledAllocator<T>&, const PooledAllocator<U>&) noexcept {
  return true;
}

}  // namespace sluice::http

#endif  // SLUICE_HTTP_TRANSPORT_POOLED_ALLOCATOR_H_
