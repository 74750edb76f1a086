// Oniguruma as the engine of <dsv41/text/unicode_regex.hpp>, when DSV41_HAVE_ONIGURUMA is defined
// (the dsv41::onig target defines it and links libonig). Patterns compile as the `tokenizers`
// package compiles them through the onig crate: ONIG_SYNTAX_ONIGURUMA (the library's default
// syntax), ONIG_OPTION_NONE. The subject is the code-point array itself, searched as UTF-32 in
// host byte order, so offsets are code-point indices and no UTF-8 copy is made.
//
// Limits, per search and per thread (an OnigMatchParam in the scratch; no global setter is used):
// 10,000,000 retries per match attempt (libonig's default, the one `tokenizers` runs with), a
// retry budget for each search proportional to the window searched, and a backtracking-stack
// bound; going past one is a resource_exhausted Status instead of an unbounded run.
//
// Global state: libonig initializes itself on the first onig_new (onig_reg_init calls
// onig_initialize). That state lives in libonig, not here; the first compile is not safe to race
// with another first compile, so compile (load a tokenizer) on one thread first, or call
// onig_initialize() at program start, before compiling from several threads. After that a compiled
// regex is read-only and searched concurrently, each thread with its own RegexScratch.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <dsv41/core/status.hpp>

namespace dsv41::text::detail {

// Per-thread Oniguruma state, present (empty) in every build so that layouts never depend on
// DSV41_HAVE_ONIGURUMA.
struct OnigScratch {
  std::shared_ptr<void> region;  // OnigRegion
  std::shared_ptr<void> param;   // OnigMatchParam
  long limits_for = -1;          // the window length the param's limits were set for
};
// Status assignment through a void cast: Status is [[nodiscard]], and nvcc warns on a plain
// `a = b` because operator= returns Status&.
inline void set_status(Status& dst, Status src) { static_cast<void>(dst = std::move(src)); }

// onig_find below: 1 with the match in [ms, me), 0 for none, -1 with a non-ok Status.
using OnigFind = int (*)(void* reg, OnigScratch& os, const uint32_t* cp, int lo, int hi, int from, int& ms, int& me,
                         dsv41::Status& st);

}  // namespace dsv41::text::detail

#if defined(DSV41_HAVE_ONIGURUMA)
#include <oniguruma.h>

#include <algorithm>
#include <bit>
#include <string>
#include <string_view>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/core/utf8.hpp>

namespace dsv41::text::detail {

inline OnigEncoding onig_utf32() {
  return std::endian::native == std::endian::little ? ONIG_ENCODING_UTF32_LE : ONIG_ENCODING_UTF32_BE;
}

inline std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int n = info ? onig_error_code_to_str(buf, code, info) : onig_error_code_to_str(buf, code);
  return std::string(reinterpret_cast<const char*>(buf), n > 0 ? static_cast<size_t>(n) : 0);
}

// Compiles a UTF-8 pattern into `out` (an OnigRegex owned by the shared_ptr).
inline Status onig_compile(std::string_view pattern, std::shared_ptr<void>& out) {
  if (!utf8::is_valid(pattern)) return error(Code::format_error, "pattern is not valid UTF-8");
  std::vector<uint32_t> units;
  const auto* p = reinterpret_cast<const unsigned char*>(pattern.data());
  for (size_t i = 0; i < pattern.size();) units.push_back(utf8::next(p, i));
  const auto* b = reinterpret_cast<const OnigUChar*>(units.data());
  OnigRegex reg = nullptr;
  OnigErrorInfo info{};
  const int r = onig_new(&reg, b, b + units.size() * 4, ONIG_OPTION_NONE, onig_utf32(), ONIG_SYNTAX_ONIGURUMA, &info);
  if (r != ONIG_NORMAL) {
    if (reg) onig_free(reg);
    // Unknown properties and unsupported constructs are syntax errors to libonig.
    return error(Code::format_error, onig_message(r, &info));
  }
  out = std::shared_ptr<void>(reg, [](void* x) { onig_free(static_cast<OnigRegex>(x)); });
  return Status::Ok();
}

inline constexpr unsigned long kOnigRetryPerMatch = 10000000UL;

// Leftmost match of `reg` in cp[lo, hi) at or after `from`: 1 with [ms, me), 0 for none, or a
// non-ok `st` (limits, memory) with -1.
inline int onig_find(void* reg, OnigScratch& os, const uint32_t* cp, int lo, int hi, int from, int& ms, int& me,
                     Status& st) {
  if (!os.region) {
    OnigRegion* rg = onig_region_new();
    OnigMatchParam* mp = onig_new_match_param();
    if (!rg || !mp) {
      if (rg) onig_region_free(rg, 1);
      if (mp) onig_free_match_param(mp);
      set_status(st, error(Code::out_of_memory, "regex: cannot allocate Oniguruma match state"));
      return -1;
    }
    os.region = std::shared_ptr<void>(rg, [](void* x) { onig_region_free(static_cast<OnigRegion*>(x), 1); });
    os.param = std::shared_ptr<void>(mp, [](void* x) { onig_free_match_param(static_cast<OnigMatchParam*>(x)); });
  }
  auto* mp = static_cast<OnigMatchParam*>(os.param.get());
  auto* rg = static_cast<OnigRegion*>(os.region.get());
  if (os.limits_for != hi - lo) {  // limits scale with the window, so one setting serves a whole walk
    const unsigned long n = static_cast<unsigned long>(hi - lo) + 1;
    onig_initialize_match_param(mp);
    onig_set_retry_limit_in_match_of_match_param(mp, kOnigRetryPerMatch);
    onig_set_retry_limit_in_search_of_match_param(mp, kOnigRetryPerMatch + 256UL * n);
    onig_set_match_stack_limit_size_of_match_param(
        mp, static_cast<unsigned int>(std::min<unsigned long>((1UL << 20) + 64UL * n, 1UL << 30)));
    os.limits_for = hi - lo;
  }
  const auto* s = reinterpret_cast<const OnigUChar*>(cp + lo);
  const auto* e = reinterpret_cast<const OnigUChar*>(cp + hi);
  const auto* start = reinterpret_cast<const OnigUChar*>(cp + from);
  onig_region_clear(rg);
  const int r = onig_search_with_param(static_cast<OnigRegex>(reg), s, e, start, e, rg, ONIG_OPTION_NONE, mp);
  if (r >= 0) {
    ms = lo + static_cast<int>(rg->beg[0] / 4);
    me = lo + static_cast<int>(rg->end[0] / 4);
    return 1;
  }
  if (r == ONIG_MISMATCH) return 0;
  const Code c = r == ONIGERR_MEMORY ? Code::out_of_memory : Code::resource_exhausted;
  set_status(st, error(c, "regex search refused (Oniguruma: " + onig_message(r, nullptr) + ")"));
  return -1;
}

}  // namespace dsv41::text::detail
#endif
