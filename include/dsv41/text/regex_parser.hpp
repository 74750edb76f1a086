// The regex parser: pattern syntax (groups, quantifiers, escapes, bracket classes, \p{..}) to a
// node tree, for the engine of <dsv41/text/unicode_regex.hpp>.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/text/regex_matcher.hpp>
#include <dsv41/text/unicode_props.hpp>
#include <dsv41/core/utf8.hpp>

namespace dsv41::text {

namespace detail {

// Parses a pattern into a tree of Nodes and adds its character classes to the Regex being built;
// RegexCompiler turns the tree into the program.
class RegexParser {
 protected:
  using Op = Regex::Op;
  using Inst = Regex::Inst;
  using CharClass = Regex::CharClass;
  static constexpr uint8_t kGreedy = Regex::kGreedy, kLazy = Regex::kLazy, kPossessive = Regex::kPossessive;

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
    int depth = 1;  // levels of the tree below and including this node
  };
  // Nesting bounds, so that the recursive parser and code generator stay far from the stack's end
  // on hostile patterns (groups, classes or quantifiers nested tens of thousands deep).
  static constexpr int kMaxNesting = 1000;  // groups, inline flags and bracket classes
  static constexpr int kMaxDepth = 4000;    // the tree: nesting plus stacked quantifiers

  RegexParser(Regex& re, std::string_view pat) : re_(re) {
    const auto* p = reinterpret_cast<const unsigned char*>(pat.data());
    size_t i = 0;
    valid_ = utf8::is_valid(pat);
    if (valid_)
      while (i < pat.size()) s_.push_back(utf8::next(p, i));
  }

  Regex& re_;
  std::vector<uint32_t> s_;
  size_t i_ = 0;
  bool valid_ = true;
  std::vector<Node> nodes_;
  std::vector<std::pair<int, size_t>> subs_;  // (node, Look/Atomic instruction)
  int nregs_ = 0;
  int nesting_ = 0;
  bool too_deep_ = false;

  // Counts one level of parser recursion for its scope.
  struct Nest {
    int& n;
    explicit Nest(int& v) : n(v) { ++n; }
    ~Nest() { --n; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };
  Status nest_check() const {
    if (nesting_ > kMaxNesting) return bad("nested more than " + std::to_string(kMaxNesting) + " levels deep");
    return Status::Ok();
  }

  bool eof() const { return i_ >= s_.size(); }
  uint32_t peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : 0; }
  int add(Node n) {
    for (int k : n.kids) n.depth = std::max(n.depth, nodes_[k].depth + 1);
    if (n.depth > kMaxDepth) too_deep_ = true;
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
    const Nest nest(nesting_);
    DSV41_TRY(nest_check());
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
      if (too_deep_) return bad("pattern nested more than " + std::to_string(kMaxDepth) + " levels deep");
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
    const Nest nest(nesting_);
    DSV41_TRY(nest_check());
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
};

}  // namespace detail

}  // namespace dsv41::text
