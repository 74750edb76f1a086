// A small backtracking regex engine over code points, for the pre-tokenizer patterns of
// Hugging Face tokenizer.json files. It follows Oniguruma's Ruby syntax as the `tokenizers`
// package uses it: leftmost match, ordered alternation, greedy/lazy/possessive quantifiers,
// \p{..} general categories (from utf8proc), \s as Unicode White_Space, \d as Nd, \w as
// Oniguruma's word set, ^/$ as line anchors, . without newline unless (?m), lookahead,
// atomic groups, (?i) with one-to-one case folding, nested classes and && intersection.
// Not supported (compile returns `unsupported`): back references, lookbehind, script
// properties such as \p{Han}, POSIX brackets, (?x). Known differences: (?i) does not fold
// one code point to several (Oniguruma matches "straße" with "STRASSE"), and nested
// quantifiers over the same text such as (\s*)+ backtrack exponentially on a failed match.
#pragma once
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/text/utf8.hpp>

namespace dsv41::text {

// Unicode general category, numbered as utf8proc does (0 = Cn, 1 = Lu, ..., 29 = Co).
inline uint8_t general_category(uint32_t cp) {
  static constexpr uint8_t kAscii[128] = {
      26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26,
      26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 23, 18, 18, 18, 20, 18, 18, 18, 14, 15, 18, 19,
      18, 13, 18, 18, 9,  9,  9,  9,  9,  9,  9,  9,  9,  9,  18, 18, 19, 19, 19, 18, 18, 1,
      1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,
      1,  1,  1,  14, 18, 15, 21, 12, 21, 2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,
      2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  14, 19, 15, 19, 26};
  if (cp < 128) return kAscii[cp];
  return static_cast<uint8_t>(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
}

// Simple case folding (one code point to one), as used for (?i) comparisons.
inline uint32_t case_fold(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  utf8proc_int32_t buf[4];
  int last = 0;
  const auto n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 4, UTF8PROC_CASEFOLD, &last);
  if (n == 1) return static_cast<uint32_t>(buf[0]);
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

inline bool is_white_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

namespace gc {
inline constexpr uint32_t bit(int c) { return 1u << c; }
inline constexpr uint32_t L = bit(UTF8PROC_CATEGORY_LU) | bit(UTF8PROC_CATEGORY_LL) | bit(UTF8PROC_CATEGORY_LT) |
                              bit(UTF8PROC_CATEGORY_LM) | bit(UTF8PROC_CATEGORY_LO);
inline constexpr uint32_t M = bit(UTF8PROC_CATEGORY_MN) | bit(UTF8PROC_CATEGORY_MC) | bit(UTF8PROC_CATEGORY_ME);
inline constexpr uint32_t N = bit(UTF8PROC_CATEGORY_ND) | bit(UTF8PROC_CATEGORY_NL) | bit(UTF8PROC_CATEGORY_NO);
inline constexpr uint32_t P = bit(UTF8PROC_CATEGORY_PC) | bit(UTF8PROC_CATEGORY_PD) | bit(UTF8PROC_CATEGORY_PS) |
                              bit(UTF8PROC_CATEGORY_PE) | bit(UTF8PROC_CATEGORY_PI) | bit(UTF8PROC_CATEGORY_PF) |
                              bit(UTF8PROC_CATEGORY_PO);
inline constexpr uint32_t S = bit(UTF8PROC_CATEGORY_SM) | bit(UTF8PROC_CATEGORY_SC) | bit(UTF8PROC_CATEGORY_SK) |
                              bit(UTF8PROC_CATEGORY_SO);
inline constexpr uint32_t Z = bit(UTF8PROC_CATEGORY_ZS) | bit(UTF8PROC_CATEGORY_ZL) | bit(UTF8PROC_CATEGORY_ZP);
inline constexpr uint32_t C = bit(UTF8PROC_CATEGORY_CN) | bit(UTF8PROC_CATEGORY_CC) | bit(UTF8PROC_CATEGORY_CF) |
                              bit(UTF8PROC_CATEGORY_CS) | bit(UTF8PROC_CATEGORY_CO);
// Oniguruma's \w (as the `tokenizers` build has it): letters, marks, Nd, Nl, Pc, plus the
// ranges below (Latin-1 superscripts and fractions, circled and squared Latin letters).
inline constexpr uint32_t Word = L | M | bit(UTF8PROC_CATEGORY_ND) | bit(UTF8PROC_CATEGORY_NL) | bit(UTF8PROC_CATEGORY_PC);
inline constexpr std::pair<uint32_t, uint32_t> kWordExtra[] = {
    {0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x24B6, 0x24E9}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189}};
inline bool is_word(uint32_t cp, uint8_t cat) {
  if ((Word >> cat) & 1u) return true;
  for (const auto& [lo, hi] : kWordExtra)
    if (cp >= lo && cp <= hi) return true;
  return false;
}
}  // namespace gc

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
};

class Regex {
 public:
  static Result<Regex> compile(std::string_view pattern) {
    Regex re;
    Parser p(re, pattern);
    Status s = p.run();
    if (!s.ok()) return Status(s.code(), "regex '" + std::string(pattern) + "': " + s.message());
    return re;
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

  // Leftmost match starting at or after `from`; false when there is none.
  bool search(const RegexInput& in, int from, int& mstart, int& mend, RegexScratch& sc) const {
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
    }
    return false;
  }

  // All matches, the way the onig crate's find_iter walks them (an empty match right after
  // the previous match is skipped by advancing one code point). Calls f(start, end).
  template <class F>
  void for_each_match(const RegexInput& in, RegexScratch& sc, F&& f) const {
    int last_end = in.lo;
    int last_match_end = -1;
    while (last_end <= in.hi) {
      int s, e;
      if (!search(in, last_end, s, e, sc)) break;
      if (e == s && last_match_end == e) {
        last_end += 1;
        continue;
      }
      last_end = e;
      last_match_end = e;
      f(s, e);
    }
  }

 private:
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

  // Runs the program from pc at pos; returns the end of the first match found, or -1.
  int run(const RegexInput& t, RegexScratch& sc, int pc, int pos) const {
    auto& st = sc.stack;
    const size_t base = st.size();
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
          if ((r >= 0) != (in.mode == 1)) { ++pc; continue; }
          goto fail;
        }
        case Op::Atomic: {
          const int r = run(t, sc, in.x, pos);
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
  }

  // ---- parsing -----------------------------------------------------------------------
  struct Node {
    enum Kind { Empty, Char, Class, Any, Assert, Concat, Alt, Repeat, Look, Atomic } kind = Empty;
    uint32_t cp = 0;
    bool icase = false;
    int cls = -1;
    bool dotall = false;
    Op assert_op = Op::Bos;
    bool neg = false;
    int min = 0, max = 0;
    uint8_t mode = kGreedy;
    std::vector<int> kids;
  };

  class Parser {
   public:
    Parser(Regex& re, std::string_view pat) : re_(re) {
      const auto* p = reinterpret_cast<const unsigned char*>(pat.data());
      size_t i = 0;
      valid_ = utf8::is_valid(pat);
      if (valid_)
        while (i < pat.size()) s_.push_back(utf8::next(p, i));
    }

    Status run() {
      if (!valid_) return error(Code::format_error, "pattern is not valid UTF-8");
      int root;
      DSV41_TRY(parse_alt(false, false, root));
      if (i_ < s_.size()) return error(Code::format_error, "unmatched ')'");
      // Main program, then the sub-programs of lookaheads and atomic groups.
      DSV41_TRY(emit(root));
      re_.prog_.push_back({Op::Match});
      for (size_t k = 0; k < subs_.size(); ++k) {  // subs_ may grow while emitting
        const auto [node, inst] = subs_[k];
        re_.prog_[inst].x = static_cast<int32_t>(re_.prog_.size());
        DSV41_TRY(emit(node));
        re_.prog_.push_back({Op::Match});
      }
      if (!nullable(root)) {
        re_.first_ = first_class(root);
        if (re_.first_ >= 0)
          for (uint32_t c = 0; c < 128; ++c) re_.first_table_[c] = re_.class_match(re_.first_, c, general_category(c));
      }
      for (Inst& in : re_.prog_) {  // copy class bitmaps into the instructions that test them
        int cls = -1;
        if (in.op == Op::Class || (in.op == Op::Repeat && in.inner == Op::Class)) cls = in.x;
        if (in.op == Op::Split) cls = in.guard;
        if (cls >= 0) {
          in.ascii[0] = re_.classes_[cls].ascii[0];
          in.ascii[1] = re_.classes_[cls].ascii[1];
        }
      }
      add_follow_guards();
      re_.tables_.assign(re_.classes_.size(), {});
      for (size_t k = 0; k < re_.classes_.size(); ++k)
        for (uint32_t c = 0; c < 128; ++c) re_.tables_[k][c] = (re_.classes_[k].ascii[c >> 6] >> (c & 63)) & 1u;
      re_.nregs_ = nregs_;
      return Status::Ok();
    }

    // For each greedy Repeat, a necessary condition of the instruction after it.
    void add_follow_guards() {
      auto& prog = re_.prog_;
      for (size_t i = 0; i < prog.size(); ++i) {
        if (prog[i].op != Op::Repeat || prog[i].mode != kGreedy || prog[i].min == prog[i].max) continue;
        size_t j = i + 1;
        for (int hops = 0; prog[j].op == Op::Jmp && hops < 8; ++hops) j = static_cast<size_t>(prog[j].x);
        const Inst nx = prog[j];
        if (nx.op == Op::Match) {
          prog[i].tail = true;
          continue;
        }
        uint8_t kind = 0;
        int cls = -1;
        auto char_class = [&](uint32_t cp, bool icase) {
          const int k = new_class();
          re_.classes_[k].ranges = {{cp, cp}};
          re_.classes_[k].icase = icase;
          re_.finish_class(k);
          return k;
        };
        if (nx.op == Op::Class) {
          kind = 1, cls = nx.x;
        } else if (nx.op == Op::Char || nx.op == Op::CharI) {
          kind = 1, cls = char_class(static_cast<uint32_t>(nx.x), nx.op == Op::CharI);
        } else if (nx.op == Op::Repeat && nx.min >= 1 && nx.inner == Op::Class) {
          kind = 1, cls = nx.x;
        } else if (nx.op == Op::Repeat && nx.min >= 1 && (nx.inner == Op::Char || nx.inner == Op::CharI)) {
          kind = 1, cls = char_class(static_cast<uint32_t>(nx.x), nx.inner == Op::CharI);
        } else if (nx.op == Op::Look && prog[nx.x].op == Op::Class && prog[nx.x + 1].op == Op::Match) {
          kind = nx.mode == 1 ? 2 : 1, cls = prog[nx.x].x;  // (?!C) or (?=C): the guard is the whole test
          if (j == i + 1) prog[i].skip = 1;
        }
        if (!kind) continue;
        prog[i].follow_kind = kind;
        prog[i].follow = cls;
        prog[i].follow_ascii[0] = re_.classes_[cls].ascii[0];
        prog[i].follow_ascii[1] = re_.classes_[cls].ascii[1];
      }
    }

   private:
    Regex& re_;
    std::vector<uint32_t> s_;
    size_t i_ = 0;
    bool valid_ = true;
    std::vector<Node> nodes_;
    std::vector<std::pair<int, size_t>> subs_;  // (node, Look/Atomic instruction)
    int nregs_ = 0;

    bool eof() const { return i_ >= s_.size(); }
    uint32_t peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : 0; }
    int add(Node n) {
      nodes_.push_back(std::move(n));
      return static_cast<int>(nodes_.size()) - 1;
    }
    int new_class() {
      re_.classes_.emplace_back();
      return static_cast<int>(re_.classes_.size()) - 1;
    }
    static Status bad(const std::string& m) { return error(Code::format_error, m); }
    static Status unsup(const std::string& m) { return error(Code::unsupported, m); }

    Status parse_alt(bool icase, bool dotall, int& out) {
      std::vector<int> alts;
      for (;;) {
        int seq;
        DSV41_TRY(parse_seq(icase, dotall, seq));
        alts.push_back(seq);
        if (!eof() && peek() == '|') {
          ++i_;
          continue;
        }
        break;
      }
      if (alts.size() == 1) {
        out = alts[0];
      } else {
        Node n;
        n.kind = Node::Alt;
        n.kids = std::move(alts);
        out = add(std::move(n));
      }
      return Status::Ok();
    }

    Status parse_seq(bool icase, bool dotall, int& out) {
      Node n;
      n.kind = Node::Concat;
      while (!eof() && peek() != '|' && peek() != ')') {
        // Inline flags "(?i)" / "(?-i)" apply to the rest of the enclosing group.
        if (peek() == '(' && peek(1) == '?') {
          size_t k = i_ + 2;
          bool on = true, ic = icase, da = dotall, ok = true;
          while (k < s_.size() && s_[k] != ')' && s_[k] != ':') {
            const uint32_t f = s_[k];
            if (f == '-') on = false;
            else if (f == 'i') ic = on;
            else if (f == 'm') da = on;
            else { ok = false; break; }
            ++k;
          }
          if (ok && k > i_ + 2 && k < s_.size() && s_[k] == ')') {
            i_ = k + 1;
            int rest;
            DSV41_TRY(parse_alt(ic, da, rest));
            n.kids.push_back(rest);
            break;
          }
        }
        int atom;
        DSV41_TRY(parse_atom(icase, dotall, atom));
        DSV41_TRY(parse_quant(atom));
        n.kids.push_back(atom);
      }
      if (n.kids.size() == 1) {
        out = n.kids[0];
        return Status::Ok();
      }
      out = add(std::move(n));
      return Status::Ok();
    }

    bool parse_int(int& v) {
      size_t k = i_;
      long long acc = 0;
      while (k < s_.size() && s_[k] >= '0' && s_[k] <= '9') {
        acc = acc * 10 + (s_[k] - '0');
        if (acc > 100000) return false;
        ++k;
      }
      if (k == i_) return false;
      v = static_cast<int>(acc);
      i_ = k;
      return true;
    }

    Status parse_quant(int& atom) {
      for (;;) {
        if (eof()) return Status::Ok();
        int mn, mx;
        const uint32_t c = peek();
        const size_t save = i_;
        if (c == '*') { mn = 0; mx = -1; ++i_; }
        else if (c == '+') { mn = 1; mx = -1; ++i_; }
        else if (c == '?') { mn = 0; mx = 1; ++i_; }
        else if (c == '{') {
          ++i_;
          mn = 0;
          mx = -1;
          bool have_min = parse_int(mn);
          bool ok = true;
          if (!eof() && peek() == ',') {
            ++i_;
            int v;
            if (parse_int(v)) mx = v;
            else if (!have_min) ok = false;
          } else {
            if (!have_min) ok = false;
            mx = mn;
          }
          if (!ok || eof() || peek() != '}') {  // not a quantifier: a literal '{'
            i_ = save;
            return Status::Ok();
          }
          ++i_;
          if (mx >= 0 && mx < mn) return bad("quantifier {n,m} with m < n");
        } else {
          return Status::Ok();
        }
        uint8_t mode = kGreedy;
        if (!eof() && peek() == '?') { mode = kLazy; ++i_; }
        else if (!eof() && peek() == '+' && c != '{') { mode = kPossessive; ++i_; }
        const Node::Kind k = nodes_[atom].kind;
        if (k == Node::Assert || k == Node::Look) return unsup("quantified assertion");
        Node r;
        r.kind = Node::Repeat;
        r.min = mn;
        r.max = mx;
        r.mode = mode;
        r.kids = {atom};
        atom = add(std::move(r));
      }
    }

    Status parse_atom(bool icase, bool dotall, int& out) {
      const uint32_t c = s_[i_++];
      Node n;
      switch (c) {
        case '(': return parse_group(icase, dotall, out);
        case '[': {
          int cls;
          DSV41_TRY(parse_class(icase, cls));
          n.kind = Node::Class;
          n.cls = cls;
          out = add(std::move(n));
          return Status::Ok();
        }
        case '.':
          n.kind = Node::Any;
          n.dotall = dotall;
          out = add(std::move(n));
          return Status::Ok();
        case '^': n.kind = Node::Assert; n.assert_op = Op::Bol; out = add(std::move(n)); return Status::Ok();
        case '$': n.kind = Node::Assert; n.assert_op = Op::Eol; out = add(std::move(n)); return Status::Ok();
        case '*': case '+': case '?': return bad("quantifier without a target");
        case '\\': return parse_escape(icase, out);
        default:
          n.kind = Node::Char;
          n.cp = icase ? case_fold(c) : c;
          n.icase = icase;
          out = add(std::move(n));
          return Status::Ok();
      }
    }

    Status parse_group(bool icase, bool dotall, int& out) {
      Node n;
      if (peek() != '?') {
        DSV41_TRY(parse_alt(icase, dotall, out));
        return close_group();
      }
      ++i_;
      const uint32_t c = peek();
      if (c == ':') {
        ++i_;
        DSV41_TRY(parse_alt(icase, dotall, out));
        return close_group();
      }
      if (c == '=' || c == '!' || c == '>') {
        ++i_;
        int kid;
        DSV41_TRY(parse_alt(icase, dotall, kid));
        DSV41_TRY(close_group());
        n.kind = c == '>' ? Node::Atomic : Node::Look;
        n.neg = c == '!';
        n.kids = {kid};
        out = add(std::move(n));
        return Status::Ok();
      }
      if (c == '<' && (peek(1) == '=' || peek(1) == '!')) return unsup("lookbehind");
      if (c == '<' || c == '\'') {  // named group
        const uint32_t close = c == '<' ? '>' : '\'';
        ++i_;
        while (!eof() && peek() != close) ++i_;
        if (eof()) return bad("unterminated group name");
        ++i_;
        DSV41_TRY(parse_alt(icase, dotall, out));
        return close_group();
      }
      if (c == '#') {
        while (!eof() && peek() != ')') ++i_;
        if (eof()) return bad("unterminated comment");
        ++i_;
        n.kind = Node::Empty;
        out = add(std::move(n));
        return Status::Ok();
      }
      // Scoped flags "(?i:...)", "(?-i:...)", "(?im-x:...)".
      bool on = true, ic = icase, da = dotall;
      while (!eof() && peek() != ':' && peek() != ')') {
        const uint32_t f = peek();
        if (f == '-') on = false;
        else if (f == 'i') ic = on;
        else if (f == 'm') da = on;
        else if (f == 'x') return unsup("(?x) extended mode");
        else return bad("unknown group syntax");
        ++i_;
      }
      if (eof() || peek() != ':') return bad("unknown group syntax");
      ++i_;
      DSV41_TRY(parse_alt(ic, da, out));
      return close_group();
    }

    Status close_group() {
      if (eof() || peek() != ')') return bad("missing ')'");
      ++i_;
      return Status::Ok();
    }

    static bool hexval(uint32_t c, uint32_t& v) {
      if (c >= '0' && c <= '9') v = c - '0';
      else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
      else return false;
      return true;
    }

    // A class for a shorthand escape (\s \d \w \h, their negations, \p{..}); -1 when the
    // escape is not one of those.
    Status shorthand(uint32_t c, int& cls) {
      cls = -1;
      auto make = [&](uint32_t cats, std::vector<std::pair<uint32_t, uint32_t>> ranges, bool neg) {
        cls = new_class();
        re_.classes_[cls].cats = cats;
        re_.classes_[cls].ranges = std::move(ranges);
        re_.classes_[cls].negated = neg;
        re_.finish_class(cls);
      };
      static constexpr std::pair<uint32_t, uint32_t> kSpace[] = {
          {9, 13}, {32, 32}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
      switch (c) {
        case 's': case 'S':
          make(0, {std::begin(kSpace), std::end(kSpace)}, c == 'S');
          return Status::Ok();
        case 'd': case 'D':
          make(gc::bit(UTF8PROC_CATEGORY_ND), {}, c == 'D');
          return Status::Ok();
        case 'w': case 'W':
          make(gc::Word, {std::begin(gc::kWordExtra), std::end(gc::kWordExtra)}, c == 'W');
          return Status::Ok();
        case 'h': case 'H':
          make(0, {{'0', '9'}, {'A', 'F'}, {'a', 'f'}}, c == 'H');
          return Status::Ok();
        case 'p': case 'P': {
          if (peek() != '{') return bad("\\p needs {name}");
          ++i_;
          bool neg = c == 'P';
          if (peek() == '^') {
            neg = !neg;
            ++i_;
          }
          std::string name;
          while (!eof() && peek() != '}') {
            const uint32_t ch = s_[i_++];
            if (ch == ' ' || ch == '_' || ch == '-') continue;
            if (ch >= 128) return bad("bad property name");
            name.push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch));
          }
          if (eof()) return bad("unterminated \\p{");
          ++i_;
          uint32_t cats = 0;
          std::vector<std::pair<uint32_t, uint32_t>> ranges;
          if (!property(name, cats, ranges)) return unsup("property \\p{" + name + "}");
          make(cats, std::move(ranges), neg);
          return Status::Ok();
        }
        default:
          return Status::Ok();
      }
    }

    static bool property(const std::string& n, uint32_t& cats, std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
      using namespace gc;
      struct Entry {
        const char* a;
        const char* b;
        uint32_t mask;
      };
      static constexpr Entry kTable[] = {
          {"l", "letter", L}, {"lu", "uppercaseletter", bit(UTF8PROC_CATEGORY_LU)},
          {"ll", "lowercaseletter", bit(UTF8PROC_CATEGORY_LL)}, {"lt", "titlecaseletter", bit(UTF8PROC_CATEGORY_LT)},
          {"lm", "modifierletter", bit(UTF8PROC_CATEGORY_LM)}, {"lo", "otherletter", bit(UTF8PROC_CATEGORY_LO)},
          {"lc", "casedletter", bit(UTF8PROC_CATEGORY_LU) | bit(UTF8PROC_CATEGORY_LL) | bit(UTF8PROC_CATEGORY_LT)},
          {"m", "mark", M}, {"mn", "nonspacingmark", bit(UTF8PROC_CATEGORY_MN)},
          {"mc", "spacingmark", bit(UTF8PROC_CATEGORY_MC)}, {"me", "enclosingmark", bit(UTF8PROC_CATEGORY_ME)},
          {"n", "number", N}, {"nd", "decimalnumber", bit(UTF8PROC_CATEGORY_ND)},
          {"nl", "letternumber", bit(UTF8PROC_CATEGORY_NL)}, {"no", "othernumber", bit(UTF8PROC_CATEGORY_NO)},
          {"p", "punctuation", P}, {"pc", "connectorpunctuation", bit(UTF8PROC_CATEGORY_PC)},
          {"pd", "dashpunctuation", bit(UTF8PROC_CATEGORY_PD)}, {"ps", "openpunctuation", bit(UTF8PROC_CATEGORY_PS)},
          {"pe", "closepunctuation", bit(UTF8PROC_CATEGORY_PE)}, {"pi", "initialpunctuation", bit(UTF8PROC_CATEGORY_PI)},
          {"pf", "finalpunctuation", bit(UTF8PROC_CATEGORY_PF)}, {"po", "otherpunctuation", bit(UTF8PROC_CATEGORY_PO)},
          {"s", "symbol", S}, {"sm", "mathsymbol", bit(UTF8PROC_CATEGORY_SM)},
          {"sc", "currencysymbol", bit(UTF8PROC_CATEGORY_SC)}, {"sk", "modifiersymbol", bit(UTF8PROC_CATEGORY_SK)},
          {"so", "othersymbol", bit(UTF8PROC_CATEGORY_SO)},
          {"z", "separator", Z}, {"zs", "spaceseparator", bit(UTF8PROC_CATEGORY_ZS)},
          {"zl", "lineseparator", bit(UTF8PROC_CATEGORY_ZL)}, {"zp", "paragraphseparator", bit(UTF8PROC_CATEGORY_ZP)},
          {"c", "other", C}, {"cc", "control", bit(UTF8PROC_CATEGORY_CC)}, {"cf", "format", bit(UTF8PROC_CATEGORY_CF)},
          {"cs", "surrogate", bit(UTF8PROC_CATEGORY_CS)}, {"co", "privateuse", bit(UTF8PROC_CATEGORY_CO)},
          {"cn", "unassigned", bit(UTF8PROC_CATEGORY_CN)},
          {"any", "any", 0xFFFFFFFFu},
      };
      for (const Entry& e : kTable)
        if (n == e.a || n == e.b) {
          cats = e.mask;
          return true;
        }
      if (n == "ascii") {
        ranges = {{0, 127}};
        return true;
      }
      return false;
    }

    // A single character escape (\n, \x41, \u00e9, \., ...); false for anything else.
    Status char_escape(uint32_t c, bool in_class, uint32_t& out, bool& ok) {
      ok = true;
      switch (c) {
        case 't': out = '\t'; return Status::Ok();
        case 'n': out = '\n'; return Status::Ok();
        case 'r': out = '\r'; return Status::Ok();
        case 'f': out = '\f'; return Status::Ok();
        case 'v': out = '\v'; return Status::Ok();
        case 'a': out = 7; return Status::Ok();
        case 'e': out = 27; return Status::Ok();
        case 'b':
          if (in_class) { out = 8; return Status::Ok(); }
          ok = false;
          return Status::Ok();
        case '0': {
          uint32_t v = 0;
          for (int k = 0; k < 2 && peek() >= '0' && peek() <= '7'; ++k) v = v * 8 + (s_[i_++] - '0');
          out = v;
          return Status::Ok();
        }
        case 'x': {
          uint32_t v = 0, h;
          if (peek() == '{') {
            ++i_;
            int digits = 0;
            while (!eof() && peek() != '}') {
              if (!hexval(s_[i_++], h)) return bad("bad \\x{...}");
              v = v * 16 + h;
              if (++digits > 8) return bad("bad \\x{...}");
            }
            if (eof()) return bad("unterminated \\x{");
            ++i_;
          } else {
            for (int k = 0; k < 2 && hexval(peek(), h); ++k, ++i_) v = v * 16 + h;
          }
          if (v > 0x10FFFF) return bad("code point out of range");
          out = v;
          return Status::Ok();
        }
        case 'u': {
          uint32_t v = 0, h;
          for (int k = 0; k < 4; ++k, ++i_) {
            if (!hexval(peek(), h)) return bad("bad \\uHHHH");
            v = v * 16 + h;
          }
          out = v;
          return Status::Ok();
        }
        default:
          if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
            ok = false;
            return Status::Ok();
          }
          out = c;  // an escaped punctuation or other literal
          return Status::Ok();
      }
    }

    Status parse_escape(bool icase, int& out) {
      if (eof()) return bad("trailing backslash");
      const uint32_t c = s_[i_++];
      Node n;
      int cls;
      DSV41_TRY(shorthand(c, cls));
      if (cls >= 0) {
        n.kind = Node::Class;
        n.cls = cls;
        out = add(std::move(n));
        return Status::Ok();
      }
      Op a;
      bool is_assert = true;
      switch (c) {
        case 'A': a = Op::Bos; break;
        case 'z': a = Op::Eos; break;
        case 'Z': a = Op::EosNl; break;
        case 'b': a = Op::WordB; break;
        case 'B': a = Op::NotWordB; break;
        default: is_assert = false; a = Op::Bos;
      }
      if (is_assert) {
        n.kind = Node::Assert;
        n.assert_op = a;
        out = add(std::move(n));
        return Status::Ok();
      }
      uint32_t v;
      bool ok;
      DSV41_TRY(char_escape(c, false, v, ok));
      if (!ok) return unsup(std::string("escape \\") + static_cast<char>(c < 128 ? c : '?'));
      n.kind = Node::Char;
      n.icase = icase;
      n.cp = icase ? case_fold(v) : v;
      out = add(std::move(n));
      return Status::Ok();
    }

    // Parses a bracket class after its '['; leaves i_ after the closing ']'.
    Status parse_class(bool icase, int& out) {
      const int cls = new_class();
      bool neg = false;
      if (peek() == '^') {
        neg = true;
        ++i_;
      }
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      std::vector<int> subs;
      std::vector<int> inters;
      bool first = true;
      for (;;) {
        if (eof()) return bad("unterminated character class");
        uint32_t c = peek();
        if (c == ']' && !first) {
          ++i_;
          break;
        }
        first = false;
        if (c == '[') {
          if (peek(1) == ':') return unsup("POSIX bracket expression");
          ++i_;
          int sub;
          DSV41_TRY(parse_class(icase, sub));
          subs.push_back(sub);
          continue;
        }
        if (c == '&' && peek(1) == '&') {
          // Everything after && (up to the closing ']') is intersected with what came before.
          i_ += 2;
          const int left = new_class();
          re_.classes_[left].ranges = std::move(ranges);
          re_.classes_[left].subs = std::move(subs);
          normalize_ranges(re_.classes_[left].ranges);
          re_.classes_[left].icase = icase;
          re_.finish_class(left);
          ranges.clear();
          subs.clear();
          // The rest of the body, up to and including our ']', is the right operand.
          int right;
          DSV41_TRY(parse_class(icase, right));
          inters.push_back(left);
          inters.push_back(right);
          break;
        }
        uint32_t lo;
        ++i_;
        if (c == '\\') {
          if (eof()) return bad("trailing backslash");
          const uint32_t e = s_[i_++];
          int sc;
          DSV41_TRY(shorthand(e, sc));
          if (sc >= 0) {
            subs.push_back(sc);
            continue;
          }
          bool ok;
          DSV41_TRY(char_escape(e, true, lo, ok));
          if (!ok) return unsup(std::string("escape \\") + static_cast<char>(e < 128 ? e : '?') + " in class");
        } else {
          lo = c;
        }
        uint32_t hi = lo;
        if (peek() == '-' && i_ + 1 < s_.size() && peek(1) != ']') {
          const size_t save = i_;
          ++i_;
          uint32_t d = s_[i_++];
          bool range_ok = true;
          if (d == '\\') {
            if (eof()) return bad("trailing backslash");
            const uint32_t e = s_[i_++];
            bool ok;
            DSV41_TRY(char_escape(e, true, d, ok));
            if (!ok) range_ok = false;
          } else if (d == '[') {
            range_ok = false;
          }
          if (range_ok) {
            if (d < lo) return bad("class range out of order");
            hi = d;
          } else {
            i_ = save;  // '-' is a literal
          }
        }
        ranges.push_back({lo, hi});
      }
      CharClass& k = re_.classes_[cls];
      k.negated = neg;
      k.icase = icase;
      if (!inters.empty()) {
        // left && right: an always-true own part, then every intersected class must match.
        k.cats = 0xFFFFFFFFu;
        k.inters = std::move(inters);
      } else {
        k.ranges = std::move(ranges);
        normalize_ranges(k.ranges);
        k.subs = std::move(subs);
      }
      re_.finish_class(cls);
      out = cls;
      return Status::Ok();
    }

    static void normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>>& r) {
      std::sort(r.begin(), r.end());
      std::vector<std::pair<uint32_t, uint32_t>> m;
      for (const auto& x : r) {
        if (!m.empty() && x.first <= m.back().second + 1) m.back().second = std::max(m.back().second, x.second);
        else m.push_back(x);
      }
      r = std::move(m);
    }

    // ---- analysis and code generation ----
    bool nullable(int id) const {
      const Node& n = nodes_[id];
      switch (n.kind) {
        case Node::Char: case Node::Class: case Node::Any: return false;
        case Node::Empty: case Node::Assert: case Node::Look: return true;
        case Node::Concat:
          for (int k : n.kids)
            if (!nullable(k)) return false;
          return true;
        case Node::Alt:
          for (int k : n.kids)
            if (nullable(k)) return true;
          return false;
        case Node::Repeat: return n.min == 0 || nullable(n.kids[0]);
        case Node::Atomic: return nullable(n.kids[0]);
      }
      return true;
    }

    // Collects what the first consumed code point can be; false when it can be anything.
    bool first_set(int id, std::vector<int>& classes, std::vector<std::pair<uint32_t, bool>>& chars) const {
      const Node& n = nodes_[id];
      switch (n.kind) {
        case Node::Char: chars.push_back({n.cp, n.icase}); return true;
        case Node::Class: classes.push_back(n.cls); return true;
        case Node::Any: return false;
        case Node::Empty: case Node::Assert: case Node::Look: return true;
        case Node::Concat:
          for (int k : n.kids) {
            if (!first_set(k, classes, chars)) return false;
            if (!nullable(k)) break;
          }
          return true;
        case Node::Alt:
          for (int k : n.kids)
            if (!first_set(k, classes, chars)) return false;
          return true;
        case Node::Repeat: case Node::Atomic: return first_set(n.kids[0], classes, chars);
      }
      return false;
    }

    // A class for the first code point of a non-nullable node, or -1 (no useful guard).
    int first_class(int id) {
      std::vector<int> classes;
      std::vector<std::pair<uint32_t, bool>> chars;
      if (!first_set(id, classes, chars)) return -1;
      const int cls = new_class();
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      for (auto [cp, ic] : chars) {
        if (!ic) {
          ranges.push_back({cp, cp});
          continue;
        }
        const int k = new_class();  // a case-insensitive single character
        re_.classes_[k].ranges = {{cp, cp}};
        re_.classes_[k].icase = true;
        re_.finish_class(k);
        classes.push_back(k);
      }
      normalize_ranges(ranges);
      re_.classes_[cls].ranges = std::move(ranges);
      re_.classes_[cls].subs = std::move(classes);
      re_.finish_class(cls);
      return cls;
    }

    size_t emit_inst(Inst in) {
      re_.prog_.push_back(in);
      return re_.prog_.size() - 1;
    }

    Status emit(int id) {
      if (re_.prog_.size() > 200000) return unsup("pattern too large");
      const Node& n = nodes_[id];
      switch (n.kind) {
        case Node::Empty: return Status::Ok();
        case Node::Char: emit_inst({n.icase ? Op::CharI : Op::Char, Op::Char, 0, static_cast<int32_t>(n.cp)}); return Status::Ok();
        case Node::Class: emit_inst({Op::Class, Op::Char, 0, n.cls}); return Status::Ok();
        case Node::Any: emit_inst({n.dotall ? Op::AnyNL : Op::Any}); return Status::Ok();
        case Node::Assert: emit_inst({n.assert_op}); return Status::Ok();
        case Node::Concat:
          for (int k : std::vector<int>(n.kids)) DSV41_TRY(emit(k));
          return Status::Ok();
        case Node::Alt: {
          const std::vector<int> kids = n.kids;
          std::vector<size_t> jumps, starts;
          std::vector<int> guards;
          size_t dispatch = 0;
          if (kids.size() >= 3) dispatch = emit_inst({Op::Dispatch});
          for (size_t a = 0; a + 1 < kids.size(); ++a) {
            const size_t split = emit_inst({Op::Split});
            starts.push_back(split);
            re_.prog_[split].x = static_cast<int32_t>(split + 1);
            if (!nullable(kids[a])) re_.prog_[split].guard = first_class(kids[a]);
            guards.push_back(re_.prog_[split].guard);
            DSV41_TRY(emit(kids[a]));
            jumps.push_back(emit_inst({Op::Jmp}));
            re_.prog_[split].y = static_cast<int32_t>(re_.prog_.size());
          }
          starts.push_back(re_.prog_.size());
          DSV41_TRY(emit(kids.back()));
          for (size_t j : jumps) re_.prog_[j].x = static_cast<int32_t>(re_.prog_.size());
          if (kids.size() >= 3) {
            // The first alternative whose guard admits c; the last one takes the rest.
            std::array<int32_t, 128> table{};
            for (uint32_t c = 0; c < 128; ++c) {
              size_t a = 0;
              while (a < guards.size() && guards[a] >= 0 && !re_.class_match(guards[a], c, general_category(c))) ++a;
              table[c] = static_cast<int32_t>(starts[a]);
            }
            re_.prog_[dispatch].x = static_cast<int32_t>(re_.dispatch_.size());
            re_.dispatch_.push_back(table);
          }
          return Status::Ok();
        }
        case Node::Look:
        case Node::Atomic: {
          const size_t at = emit_inst({n.kind == Node::Look ? Op::Look : Op::Atomic, Op::Char,
                                       static_cast<uint8_t>(n.neg ? 1 : 0)});
          subs_.push_back({n.kids[0], at});
          return Status::Ok();
        }
        case Node::Repeat: return emit_repeat(id);
      }
      return Status::Ok();
    }

    Status emit_repeat(int id) {
      const Node n = nodes_[id];
      const int kid = n.kids[0];
      const Node& k = nodes_[kid];
      if (k.kind == Node::Char || k.kind == Node::Class || k.kind == Node::Any) {
        Inst in{Op::Repeat};
        in.inner = k.kind == Node::Char ? (k.icase ? Op::CharI : Op::Char)
                   : k.kind == Node::Class ? Op::Class
                   : (k.dotall ? Op::AnyNL : Op::Any);
        in.x = k.kind == Node::Char ? static_cast<int32_t>(k.cp) : k.cls;
        in.min = n.min;
        in.max = n.max;
        in.mode = n.mode;
        emit_inst(in);
        return Status::Ok();
      }
      if (n.mode == kPossessive) {  // x*+ == (?>x*)
        Node g = n;
        g.mode = kGreedy;
        const int greedy = add(g);
        Node a;
        a.kind = Node::Atomic;
        a.kids = {greedy};
        return emit(add(std::move(a)));
      }
      if (n.min > 1000 || n.max > 1000) return unsup("counted repetition above 1000");
      for (int r = 0; r < n.min; ++r) DSV41_TRY(emit(kid));
      const bool lazy = n.mode == kLazy;
      const int guard = nullable(kid) ? -1 : first_class(kid);
      if (n.max < 0) {
        const bool empty_ok = nullable(kid);
        const int reg = empty_ok ? nregs_++ : -1;
        const size_t loop = emit_inst({Op::Split});
        const size_t body = re_.prog_.size();
        if (empty_ok) emit_inst({Op::Mark, Op::Char, 0, reg});
        DSV41_TRY(emit(kid));
        size_t progress = 0;
        if (empty_ok) progress = emit_inst({Op::Progress, Op::Char, 0, reg});
        emit_inst({Op::Jmp, Op::Char, 0, static_cast<int32_t>(loop)});
        const size_t exit = re_.prog_.size();
        if (empty_ok) re_.prog_[progress].y = static_cast<int32_t>(exit);
        set_split(loop, body, exit, lazy, guard);
        return Status::Ok();
      }
      std::vector<size_t> splits;
      for (int r = n.min; r < n.max; ++r) {
        splits.push_back(emit_inst({Op::Split}));
        DSV41_TRY(emit(kid));
      }
      const size_t exit = re_.prog_.size();
      for (size_t s : splits) set_split(s, s + 1, exit, lazy, guard);
      return Status::Ok();
    }

    void set_split(size_t at, size_t body, size_t exit, bool lazy, int guard) {
      Inst& in = re_.prog_[at];
      if (!lazy) {
        in.x = static_cast<int32_t>(body);
        in.y = static_cast<int32_t>(exit);
        in.guard = guard;
      } else {
        in.x = static_cast<int32_t>(exit);
        in.y = static_cast<int32_t>(body);
      }
    }
  };
};

}  // namespace dsv41::text
