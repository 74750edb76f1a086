// The regex compiler: a parsed pattern to the program the matcher of
// <dsv41/text/unicode_regex.hpp> runs, and Regex::compile.
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
#include <dsv41/text/regex_parser.hpp>
#include <dsv41/text/unicode_props.hpp>

namespace dsv41::text {

namespace detail {

// Code generation: the parsed tree to the Regex's program, plus the guards and tables that let the
// matcher skip work.
class RegexCompiler : RegexParser {
 public:
  RegexCompiler(Regex& re, std::string_view pattern) : RegexParser(re, pattern) {}

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

}  // namespace detail

inline Result<Regex> Regex::compile(std::string_view pattern, RegexEngine engine) {
  Regex re;
  auto build = [&]() -> Status {
    if (engine == RegexEngine::Oniguruma && !have_oniguruma())
      return error(Code::unsupported, "this build has no Oniguruma (DSV41_HAVE_ONIGURUMA)");
#if defined(DSV41_HAVE_ONIGURUMA)
    if (engine == RegexEngine::Oniguruma) {
      re.onig_find_ = &detail::onig_find;
      return detail::onig_compile(pattern, re.onig_);
    }
    if (engine == RegexEngine::Default) {
      // The own engine first (3-4x faster, the same ids on the tokenizer cases), Oniguruma for what it lacks
      // (lookbehind, script properties) and for searches it refuses (over its step budget).
      detail::RegexCompiler own(re, pattern);
      const Status so = own.run();
      Regex alt;
      alt.onig_find_ = &detail::onig_find;
      const Status sa = detail::onig_compile(pattern, alt.onig_);
      if (so.ok()) {
        re.own_ = true;
        if (sa.ok()) {
          re.onig_ = std::move(alt.onig_);
          re.onig_find_ = alt.onig_find_;
        }
        return Status::Ok();
      }
      if (so.code() != Code::unsupported || !sa.ok()) return so;
      re = std::move(alt);
      return Status::Ok();
    }
#endif
    detail::RegexCompiler p(re, pattern);
    const Status st = p.run();
    re.own_ = st.ok();
    return st;
  };
  const Status s = build();
  if (!s.ok()) return Status(s.code(), "regex '" + std::string(pattern) + "': " + s.message());
  return Result<Regex>(std::move(re));
}

}  // namespace dsv41::text
