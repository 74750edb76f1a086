// The compiled Regex of <dsv41/text/unicode_regex.hpp>: its program (instructions and character
// classes) and the backtracking matcher that runs it, or an Oniguruma regex (regex_onig.hpp).
// compile() is in regex_compiler.hpp.
#pragma once
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/text/regex_onig.hpp>
#include <dsv41/text/unicode_props.hpp>
#include <dsv41/core/utf8.hpp>

namespace dsv41::text {

// Code points of the text being matched, with their general categories; a match runs on the
// window [lo, hi), which behaves as the whole subject (anchors and lookahead stop there).
struct RegexInput {
  const uint32_t* cp = nullptr;
  const uint8_t* cat = nullptr;
  int lo = 0, hi = 0;
};

// Reusable working memory for matching; one per thread.
struct RegexScratch {
  struct Frame {
    int kind, pc, pos, aux;
    int aux2 = 0;  // kRepGreedy: the Repeat instruction
  };
  // The backtracking stack; push stays inline, growth is the rare out-of-line path.
  struct Stack {
    std::vector<Frame> v;
    Frame* data = nullptr;
    size_t n = 0, cap = 0;
    Stack() = default;
    Stack(const Stack&) = delete;
    Stack& operator=(const Stack&) = delete;
    size_t size() const { return n; }
    void push(Frame f) {
      if (n == cap) grow();
      data[n++] = f;
    }
    Frame pop() { return data[--n]; }
    void resize(size_t k) { n = k; }
    [[gnu::noinline]] void grow() {
      v.resize(v.empty() ? 256 : v.size() * 2);
      data = v.data();
      cap = v.size();
    }
  };
  Stack stack;
  std::vector<int> regs;
  // The own engine's work budget for the current search or for_each_match, in steps (branches
  // taken, backtracks, code points scanned by a repeat).
  uint64_t steps = 0, step_limit = 0;
  Status status;  // why the last search stopped early (ok when it did not)
  detail::OnigScratch onig;
};

// Which engine runs a Regex. Default: the own engine (faster), with Oniguruma where the build has it
// (DSV41_HAVE_ONIGURUMA) for patterns the own engine lacks and for searches it refuses over its budget.
enum class RegexEngine : uint8_t { Default, Own, Oniguruma };

namespace detail {
class RegexParser;
class RegexCompiler;
}  // namespace detail

class Regex {
 public:
  // Compiles `pattern` (defined in regex_compiler.hpp).
  static Result<Regex> compile(std::string_view pattern, RegexEngine engine = RegexEngine::Default);

  static constexpr bool have_oniguruma() {
#if defined(DSV41_HAVE_ONIGURUMA)
    return true;
#else
    return false;
#endif
  }
  RegexEngine engine() const { return own_ || !onig_ ? RegexEngine::Own : RegexEngine::Oniguruma; }
  bool has_fallback() const { return own_ && onig_ != nullptr; }  // Oniguruma behind the own engine

  // The own engine's budget: a search (or all searches of one for_each_match) over n code points
  // may take kStepFloor + kStepsPerCp * (n + 1) * program size steps; past that it stops with
  // resource_exhausted, so no pattern or input runs exponentially long.
  static constexpr uint64_t kStepFloor = uint64_t{1} << 22;
  static constexpr uint64_t kStepsPerCp = 16;
  uint64_t step_budget(int n) const {
    return kStepFloor + kStepsPerCp * (static_cast<uint64_t>(n > 0 ? n : 0) + 1) * (prog_.size() + 1);
  }

  // Escapes a literal string into a pattern that matches exactly it.
  static std::string escape(std::string_view lit) {
    std::string out;
    for (char c : lit) {
      if (std::string_view("\\.+*?()|[]{}^$#&-~ \t\n\r\f\v/").find(c) != std::string_view::npos) {
        if (c == '\t') { out += "\\t"; continue; }
        if (c == '\n') { out += "\\n"; continue; }
        if (c == '\r') { out += "\\r"; continue; }
        if (c == '\f') { out += "\\f"; continue; }
        if (c == '\v') { out += "\\v"; continue; }
        if (c != ' ' && c != '/') out.push_back('\\');
      }
      out.push_back(c);
    }
    return out;
  }

  // Leftmost match starting at or after `from`; false when there is none or when the search was
  // refused (a limit; sc.status says why).
  bool search(const RegexInput& in, int from, int& mstart, int& mend, RegexScratch& sc) const {
    detail::set_status(sc.status, Status::Ok());
    sc.steps = 0;
    sc.step_limit = step_budget(in.hi - from);
    return search_budgeted(in, from, mstart, mend, sc);
  }

  // All matches, the way the onig crate's find_iter walks them (an empty match right after
  // the previous match is skipped by advancing one code point). Calls f(start, end). A refused
  // search ends the walk: the Status says so, and f has seen the matches before it.
  template <class F>
  Status for_each_match(const RegexInput& in, RegexScratch& sc, F&& f) const {
    detail::set_status(sc.status, Status::Ok());
    sc.steps = 0;
    sc.step_limit = step_budget(in.hi - in.lo);
    int last_end = in.lo;
    int last_match_end = -1;
    while (last_end <= in.hi) {
      int s, e;
      if (!search_budgeted(in, last_end, s, e, sc)) break;
      if (e == s && last_match_end == e) {
        last_end += 1;
        continue;
      }
      last_end = e;
      last_match_end = e;
      f(s, e);
    }
    return sc.status;
  }

 private:
  friend class detail::RegexParser;
  friend class detail::RegexCompiler;

  bool search_budgeted(const RegexInput& in, int from, int& mstart, int& mend, RegexScratch& sc) const {
    if (!own_) return onig_find_(onig_.get(), sc.onig, in.cp, in.lo, in.hi, from, mstart, mend, sc.status) == 1;
    if (sc.regs.size() < static_cast<size_t>(nregs_)) sc.regs.resize(nregs_, -1);
    const uint8_t* ft = first_table_.data();
    for (int s = from; s <= in.hi; ++s) {
      if (first_ >= 0) {  // skip positions where no match can start
        while (s < in.hi) {
          const uint32_t c = in.cp[s];
          if (c < 128 ? ft[c] : class_slow(first_, c, in.cat[s])) break;
          ++s;
        }
        if (s >= in.hi) return false;
      }
      const int e = run(in, sc, 0, s);
      if (e >= 0) {
        mstart = s;
        mend = e;
        return true;
      }
      if (e == kOverBudget) {
        if (onig_)  // Oniguruma behind the own engine: this search (and the walk's next ones) goes there
          return onig_find_(onig_.get(), sc.onig, in.cp, in.lo, in.hi, from, mstart, mend, sc.status) == 1;
        detail::set_status(sc.status, error(Code::resource_exhausted,
                                            "regex search refused: more than " + std::to_string(sc.step_limit) +
                                                " backtracking steps (pattern too ambiguous for this input)"));
        return false;
      }
    }
    return false;
  }

  enum class Op : uint8_t {
    Char, CharI, Class, Any, AnyNL, Split, Jmp, Match, Repeat, Look, Atomic,
    Bol, Eol, Bos, Eos, EosNl, WordB, NotWordB, Mark, Progress, Dispatch,
  };
  enum RepMode : uint8_t { kGreedy = 0, kLazy = 1, kPossessive = 2 };
  struct Inst {
    Op op;
    Op inner = Op::Char;  // Repeat: the single-character test it repeats
    uint8_t mode = 0;     // Repeat: RepMode; Look: 1 = negative
    int32_t x = 0, y = 0; // operands (code point, class, targets, register)
    int32_t guard = -1;   // Split: class the next code point must be in for x to be tried
    int32_t min = 0, max = 0;
    uint64_t ascii[2] = {0, 0};  // ASCII members of the class in x (Class, Repeat) or guard (Split)
    // Greedy Repeat: what the next instruction needs at the position the repeat stops at
    // (1: a code point in class `follow`; 2: the end or a code point not in it). Positions
    // that fail it are skipped instead of being tried.
    uint8_t follow_kind = 0;
    uint8_t skip = 0;   // Repeat: the next instruction is a lookahead that follow_kind decides; jump over it
    bool tail = false;  // Repeat: only Jmps lead from it to Match, so shorter counts are never needed
    int32_t follow = -1;
    uint64_t follow_ascii[2] = {0, 0};
  };

  struct CharClass {
    bool negated = false;
    bool icase = false;
    uint32_t cats = 0;                                  // general category bits
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive, sorted
    std::vector<int> subs;                              // union members (classes)
    std::vector<int> inters;                            // intersected classes (&&)
    uint64_t ascii[2] = {0, 0};                         // final answer for cp < 128
  };

  std::vector<Inst> prog_;
  std::vector<CharClass> classes_;
  std::vector<std::array<uint8_t, 128>> tables_;  // per class: 1 for ASCII members (for scans)
  // Dispatch tables: for an ASCII code point, where in an alternation's chain of Splits to
  // start (skipping alternatives whose first code point cannot be it).
  std::vector<std::array<int32_t, 128>> dispatch_;
  int first_ = -1;  // class of possible first code points, -1 when the pattern can match empty
  std::array<uint8_t, 128> first_table_{};  // ASCII code points that can start a match
  int nregs_ = 0;
  // An OnigRegex and its search (regex_onig.hpp) when Oniguruma runs this pattern. The search is
  // a pointer so that no member depends on DSV41_HAVE_ONIGURUMA: translation units built with
  // and without it can share a Regex.
  std::shared_ptr<void> onig_;
  bool own_ = false;  // the own program is compiled (else Oniguruma runs)
  detail::OnigFind onig_find_ = nullptr;

  // Membership before negation.
  bool class_raw(int idx, uint32_t cp, uint8_t cat) const {
    const CharClass& c = classes_[idx];
    bool m = (c.cats >> cat) & 1u;
    if (!m && !c.ranges.empty()) {
      auto it = std::upper_bound(c.ranges.begin(), c.ranges.end(), std::make_pair(cp, std::numeric_limits<uint32_t>::max()));
      if (it != c.ranges.begin() && cp <= std::prev(it)->second) m = true;
    }
    if (!m)
      for (int s : c.subs)
        if (class_match(s, cp, cat)) {
          m = true;
          break;
        }
    if (m)
      for (int s : c.inters)
        if (!class_match(s, cp, cat)) {
          m = false;
          break;
        }
    return m;
  }
  // Case-insensitive classes match a code point when any of its case variants is a member;
  // negation applies after that, as in Oniguruma ((?i)[^a-z] excludes A-Z too).
  [[gnu::noinline]] bool class_slow(int idx, uint32_t cp, uint8_t cat) const {
    const CharClass& c = classes_[idx];
    bool m = class_raw(idx, cp, cat);
    if (!m && c.icase) {
      const uint32_t alts[3] = {case_fold(cp), static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))),
                                static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)))};
      for (uint32_t a : alts)
        if (a != cp && class_raw(idx, a, general_category(a))) {
          m = true;
          break;
        }
    }
    return m != c.negated;
  }
  bool class_match(int idx, uint32_t cp, uint8_t cat) const {
    if (cp < 128) return (classes_[idx].ascii[cp >> 6] >> (cp & 63)) & 1u;
    return class_slow(idx, cp, cat);
  }
  // Class test with the ASCII bitmap carried in the instruction.
  bool in_class(const uint64_t* ascii, int idx, uint32_t cp, uint8_t cat) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1u;
    return class_slow(idx, cp, cat);
  }
  void finish_class(int idx) {
    uint64_t a[2] = {0, 0};
    for (uint32_t c = 0; c < 128; ++c)
      if (class_slow(idx, c, general_category(c))) a[c >> 6] |= uint64_t{1} << (c & 63);
    classes_[idx].ascii[0] = a[0];
    classes_[idx].ascii[1] = a[1];
  }

  bool single(const Inst& in, const RegexInput& t, int p) const {
    const uint32_t c = t.cp[p];
    switch (in.inner) {
      case Op::Char: return c == static_cast<uint32_t>(in.x);
      case Op::CharI: return case_fold(c) == static_cast<uint32_t>(in.x);
      case Op::Class: return in_class(in.ascii, in.x, c, t.cat[p]);
      case Op::Any: return c != '\n';
      default: return true;  // AnyNL
    }
  }

  [[gnu::always_inline]] bool follow_ok(const Inst& in, const RegexInput& t, int p) const {
    if (p >= t.hi) return in.follow_kind == 2;
    const uint32_t c = t.cp[p];
    const bool m = c < 128 ? (in.follow_ascii[c >> 6] >> (c & 63)) & 1u : class_slow(in.follow, c, t.cat[p]);
    return m == (in.follow_kind == 1);
  }

  bool is_word(const RegexInput& t, int p) const { return gc::is_word(t.cp[p], t.cat[p]); }

  enum FrameKind { kBranch, kRepGreedy, kRepLazy, kRestore };
  static constexpr int kOverBudget = -2;

  // Runs the program from pc at pos; returns the end of the first match found, -1 for none, or
  // kOverBudget when sc.steps passed sc.step_limit.
  int run(const RegexInput& t, RegexScratch& sc, int pc, int pos) const {
    auto& st = sc.stack;
    const size_t base = st.size();
    if (++sc.steps > sc.step_limit) return kOverBudget;
    for (;;) {
      const Inst& in = prog_[pc];
      switch (in.op) {
        case Op::Char:
          if (pos < t.hi && t.cp[pos] == static_cast<uint32_t>(in.x)) { ++pos; ++pc; continue; }
          goto fail;
        case Op::CharI:
          if (pos < t.hi && case_fold(t.cp[pos]) == static_cast<uint32_t>(in.x)) { ++pos; ++pc; continue; }
          goto fail;
        case Op::Class:
          if (pos < t.hi && in_class(in.ascii, in.x, t.cp[pos], t.cat[pos])) { ++pos; ++pc; continue; }
          goto fail;
        case Op::Any:
          if (pos < t.hi && t.cp[pos] != '\n') { ++pos; ++pc; continue; }
          goto fail;
        case Op::AnyNL:
          if (pos < t.hi) { ++pos; ++pc; continue; }
          goto fail;
        case Op::Split:
          if (in.guard >= 0 && !(pos < t.hi && in_class(in.ascii, in.guard, t.cp[pos], t.cat[pos]))) {
            pc = in.y;
            continue;
          }
          if (++sc.steps > sc.step_limit) goto over;
          st.push({kBranch, in.y, pos, 0});
          pc = in.x;
          continue;
        case Op::Jmp:
          pc = in.x;
          continue;
        case Op::Dispatch:
          pc = pos < t.hi && t.cp[pos] < 128 ? dispatch_[in.x][t.cp[pos]] : pc + 1;
          continue;
        case Op::Match:
          st.resize(base);
          return pos;
        case Op::Repeat: {
          const int start = pos;
          const int lim = in.max < 0 || in.max > t.hi - pos ? t.hi : pos + in.max;
          if (in.mode == kLazy) {
            int p = pos;
            for (int k = 0; k < in.min; ++k, ++p)
              if (p >= t.hi || !single(in, t, p)) goto fail;
            st.push({kRepLazy, pc, p, in.min});
            pos = p;
            ++pc;
            continue;
          }
          int p = pos;
          switch (in.inner) {  // the hot loops, without per-character dispatch
            case Op::Class: {
              const uint8_t* tb = tables_[in.x].data();
              while (p < lim) {
                const uint32_t c = t.cp[p];
                if (c < 128 ? !tb[c] : !class_slow(in.x, c, t.cat[p])) break;
                ++p;
              }
              break;
            }
            case Op::Char:
              while (p < lim && t.cp[p] == static_cast<uint32_t>(in.x)) ++p;
              break;
            default:
              while (p < lim && single(in, t, p)) ++p;
          }
          sc.steps += static_cast<uint64_t>(p - start);
          if (p - start < in.min) goto fail;
          if (in.mode == kGreedy) {
            const int lo = start + in.min;
            if (in.follow_kind) {
              while (p > lo && !follow_ok(in, t, p)) --p;
              if (!follow_ok(in, t, p)) goto fail;
            }
            if (p > lo && !in.tail) st.push({kRepGreedy, pc + 1 + in.skip, p, lo, pc});
            pos = p;
            pc += 1 + in.skip;
            continue;
          }
          pos = p;
          ++pc;
          continue;
        }
        case Op::Look: {
          const int r = run(t, sc, in.x, pos);
          if (r == kOverBudget) goto over;
          if ((r >= 0) != (in.mode == 1)) { ++pc; continue; }
          goto fail;
        }
        case Op::Atomic: {
          const int r = run(t, sc, in.x, pos);
          if (r == kOverBudget) goto over;
          if (r < 0) goto fail;
          pos = r;
          ++pc;
          continue;
        }
        case Op::Bol:
          if (pos == t.lo || t.cp[pos - 1] == '\n') { ++pc; continue; }
          goto fail;
        case Op::Eol:
          if (pos == t.hi || t.cp[pos] == '\n') { ++pc; continue; }
          goto fail;
        case Op::Bos:
          if (pos == t.lo) { ++pc; continue; }
          goto fail;
        case Op::Eos:
          if (pos == t.hi) { ++pc; continue; }
          goto fail;
        case Op::EosNl:
          if (pos == t.hi || (pos + 1 == t.hi && t.cp[pos] == '\n')) { ++pc; continue; }
          goto fail;
        case Op::WordB:
        case Op::NotWordB: {
          const bool a = pos > t.lo && is_word(t, pos - 1);
          const bool b = pos < t.hi && is_word(t, pos);
          if ((a != b) == (in.op == Op::WordB)) { ++pc; continue; }
          goto fail;
        }
        case Op::Mark:
          st.push({kRestore, in.x, sc.regs[in.x], 0});
          sc.regs[in.x] = pos;
          ++pc;
          continue;
        case Op::Progress:
          pc = pos == sc.regs[in.x] ? in.y : pc + 1;
          continue;
      }
    fail:
      for (;;) {
        if (st.size() == base) return -1;
        if (++sc.steps > sc.step_limit) goto over;
        const RegexScratch::Frame f = st.pop();
        if (f.kind == kBranch) {
          pc = f.pc;
          pos = f.pos;
          break;
        }
        if (f.kind == kRepGreedy) {
          int p = f.pos - 1;
          const Inst& ri = prog_[f.aux2];
          if (ri.follow_kind) {
            while (p > f.aux && !follow_ok(ri, t, p)) --p;
            if (!follow_ok(ri, t, p)) continue;
          }
          if (p > f.aux) st.push({kRepGreedy, f.pc, p, f.aux, f.aux2});
          pc = f.pc;
          pos = p;
          break;
        }
        if (f.kind == kRepLazy) {
          const Inst& ri = prog_[f.pc];
          if ((ri.max < 0 || f.aux < ri.max) && f.pos < t.hi && single(ri, t, f.pos)) {
            st.push({kRepLazy, f.pc, f.pos + 1, f.aux + 1});
            pc = f.pc + 1;
            pos = f.pos + 1;
            break;
          }
          continue;
        }
        sc.regs[f.pc] = f.pos;  // kRestore
      }
    }
  over:  // unwind this level (its registers are restored as the frames go)
    while (st.size() > base) {
      const RegexScratch::Frame f = st.pop();
      if (f.kind == kRestore) sc.regs[f.pc] = f.pos;
    }
    return kOverBudget;
  }
};

}  // namespace dsv41::text
