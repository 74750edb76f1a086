// libstdc++'s std::nth_element and std::partial_sort (GCC 12, bits/stl_algo.h and bits/stl_heap.h),
// restated step for step as __host__ __device__ functions over (score, block) pairs, so that a GPU thread
// picks exactly the same set as cpu::candidate_mask does on the host (and the fixtures, made by torch's
// CPU topk, which calls the same functions). Exact ties between block scores are frequent (relu-dead
// indexer heads give exact zeros), so only the same algorithm reproduces the same choice among them.
// Plain C++ as well: tests/gpu/test_std_select.cpp checks it against the real std:: functions.
#pragma once
#include <cstdint>

#include <dsv41/core/host_device.hpp>

namespace dsv41::gpu::stdsel {

struct Pair {
  float first;
  int second;
};

// cpu::candidate_mask's order: NaN first, then larger scores first.
DSV41_HD inline bool greater(const Pair& a, const Pair& b) {
  const bool an = a.first != a.first, bn = b.first != b.first;
  return (an && !bn) || a.first > b.first;
}

DSV41_HD inline void swap_at(Pair* v, int64_t i, int64_t j) {
  const Pair t = v[i];
  v[i] = v[j];
  v[j] = t;
}

DSV41_HD inline int64_t lg(int64_t n) {  // std::__lg: floor(log2(n)), n > 0
  int64_t r = -1;
  while (n) { n >>= 1; ++r; }
  return r;
}

// ---- heap (bits/stl_heap.h) ----
DSV41_HD inline void push_heap(Pair* first, int64_t hole, int64_t top, Pair value) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && greater(first[parent], value)) {
    first[hole] = first[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  first[hole] = value;
}

DSV41_HD inline void adjust_heap(Pair* first, int64_t hole, int64_t len, Pair value) {
  const int64_t top = hole;
  int64_t second = hole;
  while (second < (len - 1) / 2) {
    second = 2 * (second + 1);
    if (greater(first[second], first[second - 1])) second--;
    first[hole] = first[second];
    hole = second;
  }
  if ((len & 1) == 0 && second == (len - 2) / 2) {
    second = 2 * (second + 1);
    first[hole] = first[second - 1];
    hole = second - 1;
  }
  push_heap(first, hole, top, value);
}

DSV41_HD inline void make_heap(Pair* first, int64_t len) {
  if (len < 2) return;
  int64_t parent = (len - 2) / 2;
  while (true) {
    adjust_heap(first, parent, len, first[parent]);
    if (parent == 0) return;
    parent--;
  }
}

// __pop_heap(first, last, result): *result goes into the heap, the top goes to *result.
DSV41_HD inline void pop_heap(Pair* first, int64_t len, Pair* result) {
  const Pair value = *result;
  *result = first[0];
  adjust_heap(first, 0, len, value);
}

DSV41_HD inline void heap_select(Pair* first, int64_t middle, int64_t last) {
  make_heap(first, middle);
  for (int64_t i = middle; i < last; ++i)
    if (greater(first[i], first[0])) pop_heap(first, middle, first + i);
}

DSV41_HD inline void sort_heap(Pair* first, int64_t len) {
  while (len > 1) {
    --len;
    pop_heap(first, len, first + len);
  }
}

// ---- nth_element / partial_sort (bits/stl_algo.h) ----
DSV41_HD inline void move_median_to_first(Pair* v, int64_t result, int64_t a, int64_t b, int64_t c) {
  if (greater(v[a], v[b])) {
    if (greater(v[b], v[c])) swap_at(v, result, b);
    else if (greater(v[a], v[c])) swap_at(v, result, c);
    else swap_at(v, result, a);
  } else if (greater(v[a], v[c])) swap_at(v, result, a);
  else if (greater(v[b], v[c])) swap_at(v, result, c);
  else swap_at(v, result, b);
}

DSV41_HD inline int64_t unguarded_partition(Pair* v, int64_t first, int64_t last, int64_t pivot) {
  while (true) {
    while (greater(v[first], v[pivot])) ++first;
    --last;
    while (greater(v[pivot], v[last])) --last;
    if (!(first < last)) return first;
    swap_at(v, first, last);
    ++first;
  }
}

DSV41_HD inline int64_t unguarded_partition_pivot(Pair* v, int64_t first, int64_t last) {
  const int64_t mid = first + (last - first) / 2;
  move_median_to_first(v, first, first + 1, mid, last - 1);
  return unguarded_partition(v, first + 1, last, first);
}

DSV41_HD inline void unguarded_linear_insert(Pair* v, int64_t last) {
  const Pair val = v[last];
  int64_t next = last - 1;
  while (greater(val, v[next])) {
    v[last] = v[next];
    last = next;
    --next;
  }
  v[last] = val;
}

DSV41_HD inline void insertion_sort(Pair* v, int64_t first, int64_t last) {
  if (first == last) return;
  for (int64_t i = first + 1; i != last; ++i) {
    if (greater(v[i], v[first])) {
      const Pair val = v[i];
      for (int64_t j = i; j > first; --j) v[j] = v[j - 1];  // move_backward(first, i, i + 1)
      v[first] = val;
    } else {
      unguarded_linear_insert(v, i);
    }
  }
}

// std::nth_element(v, v + nth, v + n, greater)
DSV41_HD inline void nth_element(Pair* v, int64_t nth, int64_t n) {
  if (n == 0 || nth == n) return;
  int64_t first = 0, last = n, depth = lg(n) * 2;
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(v + first, nth + 1 - first, last - first);
      swap_at(v, first, nth);
      return;
    }
    --depth;
    const int64_t cut = unguarded_partition_pivot(v, first, last);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertion_sort(v, first, last);
}

// std::partial_sort(v, v + middle, v + n, greater)
DSV41_HD inline void partial_sort(Pair* v, int64_t middle, int64_t n) {
  heap_select(v, middle, n);
  sort_heap(v, middle);
}

// cpu::candidate_mask's block choice for one row: q [nb] holds (block score, block id), the block of the
// newest visible entry already forced to +inf. Afterwards q[0..k) are the chosen blocks (k = min(topk, nb)),
// to be kept where their score is not −inf.
DSV41_HD inline int select_blocks(Pair* q, int nb, int topk_blocks) {
  const int k = topk_blocks < nb ? topk_blocks : nb;
  if (k <= 0) return 0;
  if (int64_t(k) * 64 <= nb) partial_sort(q, k, nb);
  else nth_element(q, k - 1, nb);
  return k;
}

}  // namespace dsv41::gpu::stdsel
