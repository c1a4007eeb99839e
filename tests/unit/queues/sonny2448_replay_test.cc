// Deterministic replays of SONNY-2448 (shared/seeds/pool-algorithms.txt,
// RingQueue): before the fix, the owner popped LIFO from tail and arbitrated
// only the last element, so a stealer's batch claim (one CAS of head from h to
// h + n) could land after the owner had taken, or taken and re-pushed, items
// inside the batch: duplicates, lost tasks, head past tail.
//
// Each replay is one fixed interleaving, driven through InterleavingAtomics:
// the stealer runs steal_half; at its claim CAS (it has already copied its
// batch) the script runs the owner's operations; then the CAS goes on. Each
// replay runs against
//   - LifoPopRing, the pre-fix owner pop written out below: the failure must
//     show (else the replay does not reproduce the bug and proves nothing);
//   - the real RingQueue: the failure must not show.
#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "interleaving_atomics.h"
#include "tpool/pool/ring_queue.h"

namespace tpool::test {
namespace {

using detail::is_power_of_two;

// The pre-SONNY-2448 RingQueue: push and steal_half as in the real queue, but
// the owner pops LIFO from tail, Chase-Lev style, taking any element but the
// last without touching head. Deliberately wrong; never use outside this test.
template <class T, std::size_t Capacity, class Atomics>
class LifoPopRing {
  static_assert(is_power_of_two(Capacity));

 public:
  static constexpr bool kBuggy = true;
  std::size_t capacity() const { return Capacity; }

  bool push(T v) {
    const std::uint64_t t = Atomics::load(tail_, std::memory_order_relaxed);
    const std::uint64_t h = Atomics::load(head_, std::memory_order_acquire);
    if (t - h >= Capacity) return false;
    Atomics::store(slots_[t % Capacity], v, std::memory_order_relaxed);
    Atomics::store(tail_, t + 1, std::memory_order_release);
    return true;
  }

  bool pop(T& out) {
    std::uint64_t t = Atomics::load(tail_, std::memory_order_relaxed);
    if (t == Atomics::load(head_, std::memory_order_acquire)) return false;
    t -= 1;
    Atomics::store(tail_, t, std::memory_order_seq_cst);
    const std::uint64_t h = Atomics::load(head_, std::memory_order_seq_cst);
    const T v = Atomics::load(slots_[t % Capacity], std::memory_order_relaxed);
    if (h < t) {  // "more than one left: no stealer can reach it" (wrong for batch steals)
      out = v;
      return true;
    }
    std::uint64_t expected = h;
    const bool won =
        h == t && Atomics::cas_strong(head_, expected, h + 1, std::memory_order_seq_cst,
                                      std::memory_order_relaxed);
    Atomics::store(tail_, t + 1, std::memory_order_relaxed);
    if (won) out = v;
    return won;
  }

  std::size_t steal_half(std::span<T> dst, std::size_t max_batch) {
    for (int attempt = 0; attempt < 256; ++attempt) {
      std::uint64_t h = Atomics::load(head_, std::memory_order_acquire);
      const std::uint64_t t = Atomics::load(tail_, std::memory_order_acquire);
      if (t <= h) return 0;
      const std::size_t n = std::min({(t - h + 1) / 2, dst.size(), max_batch});
      for (std::size_t i = 0; i < n; ++i) {
        dst[i] = Atomics::load(slots_[(h + i) % Capacity], std::memory_order_relaxed);
      }
      if (Atomics::cas_strong(head_, h, h + n, std::memory_order_acq_rel,
                              std::memory_order_acquire)) {
        return n;
      }
    }
    return 0;
  }

  std::size_t free_space() const {
    return Capacity - static_cast<std::size_t>(Atomics::load(tail_, std::memory_order_relaxed) -
                                               Atomics::load(head_, std::memory_order_acquire));
  }

 private:
  typename Atomics::template Atomic<std::uint64_t> head_{0};
  typename Atomics::template Atomic<std::uint64_t> tail_{0};
  std::array<typename Atomics::template Atomic<T>, Capacity> slots_{};
};

template <class T, std::size_t Capacity, class Atomics>
struct RealRing : detail::RingQueue<T, Capacity, Atomics> {
  static constexpr bool kBuggy = false;
};

// Items are letters so a failure message reads like the incident report.
using Item = char;

template <class Ring>
class Sonny2448Replay : public ::testing::Test {
 protected:
  Ring q;
  std::vector<Item> stealer_got;
  std::vector<Item> owner_got;

  void TearDown() override { Interleaving::disarm(); }

  void push(std::initializer_list<Item> items) {
    for (Item x : items) ASSERT_TRUE(q.push(x));
  }
  void owner_pop() {
    Item v = 0;
    ASSERT_TRUE(q.pop(v));
    owner_got.push_back(v);
  }
  // The stealer copies its batch; `owner` runs just before its claim CAS.
  void steal_with_owner_at_claim(const std::function<void()>& owner) {
    Interleaving::at(Op::kCas, 1, owner);
    std::array<Item, 32> buf{};
    const std::size_t n = q.steal_half(buf, 32);
    ASSERT_TRUE(Interleaving::fired()) << "the replay never reached the stealer's claim";
    Interleaving::disarm();
    stealer_got.insert(stealer_got.end(), buf.begin(),
                       buf.begin() + static_cast<std::ptrdiff_t>(n));
  }
  // Everything taken by anyone, including what the owner drains at the end.
  std::vector<Item> all_taken() {
    Item v = 0;
    while (q.pop(v)) owner_got.push_back(v);
    std::vector<Item> all = stealer_got;
    all.insert(all.end(), owner_got.begin(), owner_got.end());
    std::sort(all.begin(), all.end());
    return all;
  }
};

using Rings = ::testing::Types<LifoPopRing<Item, 4, InterleavingAtomics>,
                               RealRing<Item, 4, InterleavingAtomics>>;
struct RingName {
  template <class R>
  static std::string GetName(int) {
    return R::kBuggy ? "PreFixLifoPop" : "RingQueue";
  }
};
TYPED_TEST_SUITE(Sonny2448Replay, Rings, RingName);

// Failure mode 1: an item is taken twice.
//   queue a b c; stealer copies [a b] (n = ceil(3/2)); owner pops c, b;
//   stealer's CAS head 0 -> 2 still succeeds: b was taken by both.
TYPED_TEST(Sonny2448Replay, Duplicate) {
  this->push({'a', 'b', 'c'});
  this->steal_with_owner_at_claim([this] {
    this->owner_pop();
    this->owner_pop();
  });
  const std::vector<Item> all = this->all_taken();
  const bool duplicate = std::adjacent_find(all.begin(), all.end()) != all.end();
  if constexpr (TypeParam::kBuggy) {
    EXPECT_TRUE(duplicate) << "the pre-fix variant must hand out an item twice here";
    EXPECT_EQ(std::count(all.begin(), all.end(), 'b'), 2);
  } else {
    EXPECT_FALSE(duplicate);
    EXPECT_EQ(all, (std::vector<Item>{'a', 'b', 'c'}));
  }
}

// Failure mode 2: an item is never handed out.
//   queue a b c; stealer copies [a b]; owner pops c, b and pushes d, which
//   lands at position 1; stealer's CAS head 0 -> 2 succeeds and skips d.
TYPED_TEST(Sonny2448Replay, LostTask) {
  this->push({'a', 'b', 'c'});
  this->steal_with_owner_at_claim([this] {
    this->owner_pop();
    this->owner_pop();
    this->push({'d'});
  });
  const std::vector<Item> all = this->all_taken();
  const bool d_lost = std::count(all.begin(), all.end(), 'd') == 0;
  if constexpr (TypeParam::kBuggy) {
    EXPECT_TRUE(d_lost) << "the pre-fix variant must lose d here";
  } else {
    EXPECT_FALSE(d_lost);
    EXPECT_EQ(all, (std::vector<Item>{'a', 'b', 'c', 'd'}));
  }
}

// Failure mode 3: head passes tail.
//   queue a b c d; stealer copies [a b]; owner pops d, c, b (tail 4 -> 1);
//   stealer's CAS head 0 -> 2 succeeds: head 2 > tail 1. Seen from outside,
//   the owner's free space exceeds the capacity.
TYPED_TEST(Sonny2448Replay, HeadPassesTail) {
  this->push({'a', 'b', 'c', 'd'});
  this->steal_with_owner_at_claim([this] {
    this->owner_pop();
    this->owner_pop();
    this->owner_pop();
  });
  const bool head_past_tail = this->q.free_space() > this->q.capacity();
  if constexpr (TypeParam::kBuggy) {
    EXPECT_TRUE(head_past_tail) << "free_space " << this->q.free_space();
  } else {
    EXPECT_FALSE(head_past_tail) << "free_space " << this->q.free_space();
    EXPECT_EQ(this->all_taken(), (std::vector<Item>{'a', 'b', 'c', 'd'}));
    EXPECT_EQ(this->q.free_space(), this->q.capacity());
  }
}

// The fixed queue's side of the story, step by step: the owner's FIFO pops
// claim head by CAS, so the stealer's stale claim fails and it retries from
// the new head, taking only what is left.
TEST(Sonny2448Fixed, StaleClaimFailsAndRetriesFromTheNewHead) {
  detail::RingQueue<Item, 4, InterleavingAtomics> q;
  for (Item x : {'a', 'b', 'c'}) ASSERT_TRUE(q.push(x));
  std::vector<Item> owner_got;
  Interleaving::at(Op::kCas, 1, [&] {
    Item v = 0;
    ASSERT_TRUE(q.pop(v));
    owner_got.push_back(v);
  });
  std::array<Item, 32> buf{};
  const std::size_t n = q.steal_half(buf, 32);
  Interleaving::disarm();
  EXPECT_EQ(owner_got, (std::vector<Item>{'a'}));
  ASSERT_EQ(n, 1u) << "the retry sees b c and takes ceil(2/2) = 1";
  EXPECT_EQ(buf[0], 'b');
  Item v = 0;
  ASSERT_TRUE(q.pop(v));
  EXPECT_EQ(v, 'c');
}

}  // namespace
}  // namespace tpool::test
