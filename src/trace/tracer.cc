#include "trace/tracer.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <random>

namespace sluice::trace {

thread_local Span* CurrentSpan::current_ = nullptr;

namespace {

// Per-thread random ids: splitmix64 (a few instructions a number; ids need to be unique and
// spread, not unpredictable), seeded once per thread from the system's entropy.
uint64_t RandomWord() {
  thread_local uint64_t state = [] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }();
  uint64_t z = (state += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

// `word` into id[from, from + 8), big endian (the ratio sampler reads the last 8 bytes so).
template <size_t N>
void PutWord(std::array<uint8_t, N>& id, size_t from, uint64_t word) {
  for (size_t i = 0; i < 8; ++i) id[from + 7 - i] = static_cast<uint8_t>(word >> (8 * i));
}

// Where spans live: each span's block (the Span and its shared_ptr's counts) comes from a stock
// kept by the thread, which a freed block goes back to, up to kKept of them: a traced request's
// spans then cost no malloc and free (they were most of what it allocated).
template <typename T>
struct SpanBlocks {
  using value_type = T;
  static constexpr size_t kKept = 64;

  SpanBlocks() = default;
  template <typename U>
  explicit SpanBlocks(const SpanBlocks<U>& /*other*/) {}

  T* allocate(size_t n) {
    Stock* stock = Stock::Of();
    if (n != 1 || stock == nullptr || stock->blocks.empty()) return std::allocator<T>().allocate(n);
    T* block = stock->blocks.back();
    stock->blocks.pop_back();
    return block;
  }
  void deallocate(T* block, size_t n) {
    Stock* stock = Stock::Of();
    if (n != 1 || stock == nullptr || stock->blocks.size() >= kKept) {
      return std::allocator<T>().deallocate(block, n);
    }
    stock->blocks.push_back(block);
  }
  friend bool operator==(const SpanBlocks&, const SpanBlocks&) { return true; }

  // A thread's blocks; freed when the thread ends (after which its spans use malloc and free).
  struct Stock {
    explicit Stock(bool* ended) : ended(ended) { blocks.reserve(kKept); }
    Stock(const Stock&) = delete;
    Stock& operator=(const Stock&) = delete;
    ~Stock() {
      for (T* block : blocks) std::allocator<T>().deallocate(block, 1);
      *ended = true;
    }
    static Stock* Of() {
      thread_local bool ended = false;  // (trivially destroyed: valid until the thread's end)
      if (ended) return nullptr;
      thread_local Stock stock(&ended);
      return &stock;
    }
    bool* ended;
    std::vector<T*> blocks;
  };
};

// The ratio rule on a trace id's last 8 bytes (big endian): `bound` is RatioBound's.
bool BelowBound(uint64_t low, uint64_t bound) { return (low >> 1) < bound; }

}  // namespace

uint64_t RatioBound(double sampling_rate) {
  if (!(sampling_rate > 0.0)) return 0;  // NaN too
  if (sampling_rate >= 1.0) return uint64_t{1} << 63;
  return static_cast<uint64_t>(sampling_rate * 9223372036854775808.0);  // × 2^63
}

bool Sampled(const std::optional<util::TraceParent>& parent, const TraceId& trace_id,
             double sampling_rate) {
  if (parent) return parent->sampled();
  uint64_t low = 0;
  for (size_t i = 8; i < 16; ++i) low = (low << 8) | trace_id[i];
  return BelowBound(low, RatioBound(sampling_rate));
}

SpanId Tracer::NewSpanId() {
  SpanId id{};
  for (uint64_t word = 0; word == 0;) PutWord(id, 0, word = RandomWord());
  return id;
}

TraceId Tracer::NewTraceId() {
  TraceId id{};
  PutWord(id, 0, RandomWord() | 1);  // (never all zero)
  PutWord(id, 8, RandomWord());
  return id;
}

std::optional<Tracer::SampledTrace> Tracer::Sample(std::string_view traceparent) const {
  SampledTrace trace;
  if (!traceparent.empty()) trace.parent = util::ParseTraceParent(traceparent);
  if (trace.parent) {
    if (!trace.parent->sampled()) return std::nullopt;
    trace.trace_id = trace.parent->trace_id;
    return trace;
  }
  // The low half decides (Sampled's rule, its bound worked out once); the high half is drawn only
  // for a trace that is sampled.
  const uint64_t low = RandomWord();
  if (!BelowBound(low, bound_)) return std::nullopt;
  PutWord(trace.trace_id, 8, low);
  PutWord(trace.trace_id, 0, RandomWord() | 1);
  return trace;
}

std::shared_ptr<Span> Tracer::StartRequest(std::string name, SpanKind kind,
                                           std::string_view traceparent,
                                           std::string_view tracestate) {
  const std::optional<SampledTrace> trace = Sample(traceparent);
  if (!trace) return nullptr;
  return StartRequest(std::move(name), kind, *trace, tracestate);
}

Span::Span(Tracer* tracer) : tracer_(tracer) {}

wire::Buffer Tracer::FreshAttributes() {
  // (Shared by the tracers of a process: buffers are storage only.)
  thread_local std::vector<wire::Buffer> stock;
  if (stock.empty()) {
    absl::MutexLock lock(&mu_);
    const size_t n = std::min<size_t>(spare_.size(), 32);
    for (size_t i = 0; i < n; ++i) {
      stock.push_back(std::move(spare_.back()));
      spare_.pop_back();
    }
  }
  wire::Buffer attributes;
  if (!stock.empty()) {
    attributes = std::move(stock.back());
    stock.pop_back();
    attributes.clear();
  } else {
    attributes.reserve(kUsualAttributes);
  }
  return attributes;
}

std::shared_ptr<Span> Tracer::NewSpan() {
  auto span = std::allocate_shared<Span>(SpanBlocks<Span>(), this);
  span->data_.attributes = FreshAttributes();
  return span;
}

void Tracer::Recycle(std::vector<SpanData>& spent) {
  {
    absl::MutexLock lock(&mu_);
    for (SpanData& span : spent) {
      if (spare_.size() >= options_.queue_size) break;
      const size_t room = span.attributes.capacity();
      if (room >= kUsualAttributes && room <= kKeptAttributes) {
        spare_.push_back(std::move(span.attributes));
      }
    }
  }
  spent.clear();
}

std::shared_ptr<Span> Tracer::StartRequest(std::string name, SpanKind kind,
                                           const SampledTrace& trace, std::string_view tracestate) {
  std::shared_ptr<Span> span = NewSpan();
  SpanData& data = span->data_;
  data.trace_id = trace.trace_id;
  if (trace.parent) {
    data.parent_span_id = trace.parent->parent_id;
    data.remote_parent = true;
    data.flags = trace.parent->flags & 0x03;  // sampled and random: the others are reserved
    if (!tracestate.empty()) data.trace_state = util::ParseTraceState(tracestate).value_or("");
  }
  data.flags |= 1;
  data.span_id = NewSpanId();
  data.name = std::move(name);
  data.kind = kind;
  data.start_unix_ns = NowUnixNanos();
  return span;
}

void Tracer::Submit(SpanData&& span) {
  ended_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= options_.queue_size || shut_down_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(std::move(span));
  // The exporter is woken once, when as many are queued as it waits for: not at every span (a
  // condition on the mutex would be evaluated at every unlock).
  if (queue_.size() == wake_at_) ready_.Signal();
}

size_t Tracer::Take(std::vector<SpanData>& out, size_t min, size_t max, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  wake_at_ = std::max<size_t>(min, 1);
  while (!shut_down_ && queue_.size() < min) {
    if (ready_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
  }
  wake_at_ = 0;
  const size_t taken = std::min(max, queue_.size());
  if (taken == 0) return 0;
  if (out.empty() && taken == queue_.size()) {
    out.swap(queue_);  // the usual case: everything, into the exporter's emptied batch
    return taken;
  }
  const auto end = queue_.begin() + static_cast<std::ptrdiff_t>(taken);
  out.insert(out.end(), std::make_move_iterator(queue_.begin()), std::make_move_iterator(end));
  queue_.erase(queue_.begin(), end);
  return taken;
}

void Tracer::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  ready_.SignalAll();
}

bool Tracer::shut_down() const {
  absl::MutexLock lock(&mu_);
  return shut_down_;
}

size_t Tracer::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void Span::End() {
  if (ended_) return;
  ended_ = true;
  data_.end_unix_ns = tracer_->NowUnixNanos();
  if (data_.end_unix_ns < data_.start_unix_ns) data_.end_unix_ns = data_.start_unix_ns;
  tracer_->Submit(std::move(data_));
}

std::shared_ptr<Span> Span::StartChild(std::string name, SpanKind kind) const {
  std::shared_ptr<Span> span = tracer_->NewSpan();
  SpanData& child = span->data_;
  child.trace_id = data_.trace_id;
  child.parent_span_id = data_.span_id;
  child.flags = data_.flags;
  child.trace_state = data_.trace_state;
  child.span_id = Tracer::NewSpanId();
  child.name = std::move(name);
  child.kind = kind;
  child.start_unix_ns = tracer_->NowUnixNanos();
  return span;
}

std::string Span::TraceParent() const {
  return util::FormatTraceParent(
      {.trace_id = data_.trace_id, .parent_id = data_.span_id, .flags = data_.flags});
}

bool Span::record_keys() const { return tracer_->options().record_keys; }

}  // namespace sluice::trace
