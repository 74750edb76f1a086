// BPE merge step (a word's initial symbols are merged pair by pair, always the pair of
// lowest merge rank first, leftmost among equal ranks, as `tokenizers` does) and a word cache.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsv41::text {

// (left id, right id) -> (rank, merged id), open addressing.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t id = 0;
  };

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
    size_ = 0;
  }

  // Inserts unless the pair is present; returns false for a duplicate.
  bool insert(int32_t a, int32_t b, int32_t rank, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const uint64_t k = key(a, b);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = {k, rank, id};
        ++size_;
        return true;
      }
      if (slots_[i].key == k) return false;
    }
  }

  const Entry* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return &slots_[i];
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t k) {
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ull;
    k ^= k >> 29;
    return static_cast<size_t>(k);
  }
  void grow() {
    std::vector<Entry> old = std::move(slots_);
    reserve(std::max<size_t>(old.size(), 8));
    for (const Entry& e : old)
      if (e.key != kEmpty) insert(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xFFFFFFFFu), e.rank, e.id);
  }

  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Memo of word -> ids for one encode call (open addressing; keys and ids in arenas).
class WordCache {
 public:
  static uint64_t hash(std::string_view w) {
    uint64_t h = 0x243F6A8885A308D3ull ^ w.size();
    size_t i = 0;
    for (; i + 8 <= w.size(); i += 8) {
      uint64_t c;
      std::memcpy(&c, w.data() + i, 8);
      h = (h ^ c) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
    }
    uint64_t c = 0;
    std::memcpy(&c, w.data() + i, w.size() - i);
    h = (h ^ c) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
    return h * 0xBF58476D1CE4E5B9ull ^ (h >> 31);
  }

  // The cached ids of w (count in n), or nullptr.
  const int32_t* find(std::string_view w, uint64_t h, uint32_t& n) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.h == h && s.key_len == w.size() && std::memcmp(keys_.data() + s.key_off, w.data(), w.size()) == 0) {
        n = s.ids_len;
        return ids_.data() + s.ids_off;
      }
    }
  }

  void insert(std::string_view w, uint64_t h, const int32_t* ids, size_t n) {
    if (w.size() > 0xFFFF || n > 0xFFFF || count_ >= kMaxEntries) return;
    if ((count_ + 1) * 2 > slots_.size()) grow();
    size_t i = h & mask_;
    while (slots_[i].used) i = (i + 1) & mask_;
    slots_[i] = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(ids_.size()),
                 static_cast<uint16_t>(w.size()), static_cast<uint16_t>(n), true};
    keys_.append(w);
    ids_.insert(ids_.end(), ids, ids + n);
    ++count_;
  }

 private:
  static constexpr size_t kMaxEntries = size_t{1} << 18;
  struct Slot {
    uint64_t h = 0;
    uint32_t key_off = 0, ids_off = 0;
    uint16_t key_len = 0, ids_len = 0;
    bool used = false;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 256 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old)
      if (s.used) {
        size_t i = s.h & mask_;
        while (slots_[i].used) i = (i + 1) & mask_;
        slots_[i] = s;
      }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
};

// Working memory for merging one word; reused across words.
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;
  };
  std::vector<Symbol> syms;
  std::vector<Candidate> heap;
};

// Merges `ids` (the word's initial symbols) in place.
inline void bpe_merge(const MergeTable& merges, std::vector<int32_t>& ids, BpeScratch& sc) {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  if (n == 2) {  // the most common case: one possible merge
    if (const auto* m = merges.find(ids[0], ids[1])) {
      ids.resize(1);
      ids[0] = m->id;
    }
    return;
  }
  if (n <= 24) {
    // Short words: keep each adjacent pair's merge and apply the lowest rank (leftmost on
    // ties) until none is left; the same result as the queue below, with less overhead.
    int32_t rank[24], mid[24];
    int m = n;
    int32_t* w = ids.data();
    for (int i = 0; i + 1 < m; ++i) {
      const auto* e = merges.find(w[i], w[i + 1]);
      rank[i] = e ? e->rank : INT32_MAX;
      mid[i] = e ? e->id : -1;
    }
    for (;;) {
      int best = -1;
      int32_t br = INT32_MAX;
      for (int i = 0; i + 1 < m; ++i)
        if (rank[i] < br) br = rank[i], best = i;
      if (best < 0) break;
      w[best] = mid[best];
      for (int i = best + 1; i + 1 < m; ++i) w[i] = w[i + 1];
      for (int i = best + 1; i + 2 < m; ++i) rank[i] = rank[i + 1], mid[i] = mid[i + 1];
      --m;
      for (int i = std::max(best - 1, 0); i <= best && i + 1 < m; ++i) {
        const auto* e = merges.find(w[i], w[i + 1]);
        rank[i] = e ? e->rank : INT32_MAX;
        mid[i] = e ? e->id : -1;
      }
    }
    ids.resize(m);
    return;
  }
  auto& syms = sc.syms;
  auto& heap = sc.heap;
  syms.resize(n);
  heap.clear();
  for (int i = 0; i < n; ++i) syms[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  // Lowest rank first, then lowest position.
  const auto worse = [](const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  for (int i = 0; i + 1 < n; ++i)
    if (const auto* m = merges.find(ids[i], ids[i + 1])) heap.push_back({m->rank, i, m->id});
  std::make_heap(heap.begin(), heap.end(), worse);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    BpeScratch::Symbol& s = syms[top.pos];
    if (!s.alive || s.next < 0) continue;
    const int right = s.next;
    const auto* m = merges.find(s.id, syms[right].id);
    if (!m || m->id != top.id) continue;  // stale entry
    s.id = top.id;
    syms[right].alive = false;
    s.next = syms[right].next;
    if (s.next >= 0) syms[s.next].prev = top.pos;
    if (s.prev >= 0) {
      if (const auto* l = merges.find(syms[s.prev].id, s.id)) {
        heap.push_back({l->rank, s.prev, l->id});
        std::push_heap(heap.begin(), heap.end(), worse);
      }
    }
    if (s.next >= 0) {
      if (const auto* r = merges.find(s.id, syms[s.next].id)) {
        heap.push_back({r->rank, top.pos, r->id});
        std::push_heap(heap.begin(), heap.end(), worse);
      }
    }
  }
  int k = 0;
  for (int i = 0; i >= 0; i = syms[i].next) ids[k++] = syms[i].id;
  ids.resize(k);
}

}  // namespace dsv41::text
