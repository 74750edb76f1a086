// The regex engine of the pre-tokenizers (dsv41::text::Regex): syntax, Unicode classes, anchors,
// lookahead, quantifier modes, and the GPT-2 and Llama 3 split patterns on hand-derived splits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <dsv41/text/unicode_regex.hpp>
#include <dsv41/core/utf8.hpp>

using namespace dsv41;
using namespace dsv41::text;

namespace {

struct Subject {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cat;
  explicit Subject(const std::string& text) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
      cp.push_back(utf8::next(p, i));
      cat.push_back(general_category(cp.back()));
    }
  }
  RegexInput input() const { return RegexInput{cp.data(), cat.data(), 0, int(cp.size())}; }
  std::string text(int b, int e) const {
    std::string m;
    for (int k = b; k < e; ++k) utf8::append(m, cp[size_t(k)]);
    return m;
  }
};

// The engines this build has: the own one, and Oniguruma where DSV41_HAVE_ONIGURUMA is set.
std::vector<RegexEngine> engines() {
  std::vector<RegexEngine> e{RegexEngine::Own};
  if (Regex::have_oniguruma()) e.push_back(RegexEngine::Oniguruma);
  return e;
}
const char* engine_name(RegexEngine e) { return e == RegexEngine::Oniguruma ? "oniguruma" : "own"; }

struct Engine {
  RegexEngine e;
  Regex compile(const std::string& pattern) const {
    auto re = Regex::compile(pattern, e);
    INFO(engine_name(e) << ": " << re.status().to_string());
    REQUIRE(re.ok());
    REQUIRE(re->engine() == e);
    return std::move(re).value();
  }
  // Every match of `pattern` in `text`, as for_each_match walks them.
  std::vector<std::string> matches(const std::string& pattern, const std::string& text) const {
    const Regex re = compile(pattern);
    const Subject s(text);
    RegexScratch sc;
    std::vector<std::string> out;
    REQUIRE(re.for_each_match(s.input(), sc, [&](int b, int e) { out.push_back(s.text(b, e)); }).ok());
    return out;
  }
  // The (start, end) code-point spans of every match.
  std::vector<std::pair<int, int>> spans(const std::string& pattern, const std::string& text) const {
    const Regex re = compile(pattern);
    const Subject s(text);
    RegexScratch sc;
    std::vector<std::pair<int, int>> out;
    REQUIRE(re.for_each_match(s.input(), sc, [&](int b, int e) { out.emplace_back(b, e); }).ok());
    return out;
  }
};

using V = std::vector<std::string>;
using S = std::vector<std::pair<int, int>>;

const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

TEST_CASE("regex: ordered alternation, classes and quantifier modes", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  CHECK(x.matches("a|ab", "ab") == V{"a"});  // the first alternative that matches, not the longest
  CHECK(x.matches("ab|a", "ab") == V{"ab"});
  CHECK(x.matches("[a-c]+", "abxcba") == V{"ab", "cba"});
  CHECK(x.matches("[^a-c]+", "abxcba") == V{"x"});
  CHECK(x.matches("[a-c&&[^b]]", "abc") == V{"a", "c"});
  CHECK(x.matches("a+?", "aaa") == V{"a", "a", "a"});
  CHECK(x.matches("a{2}", "aaaaa") == V{"aa", "aa"});
  CHECK(x.matches("a{2,}", "a aa aaa") == V{"aa", "aaa"});
  CHECK(x.matches("a++a", "aaa").empty());  // possessive: gives nothing back
  CHECK(x.matches("a+a", "aaa") == V{"aaa"});
  CHECK(x.matches("(?i)AbC", "xabcABC") == V{"abc", "ABC"});
  CHECK(x.matches("colou?r", "color colour colouur") == V{"color", "colour"});
  CHECK(x.matches("a.c", "abc a\nc") == V{"abc"});
  CHECK(x.matches(Regex::escape("a.b*c"), "xa.b*cx aXbbc") == V{"a.b*c"});
}

TEST_CASE("regex: Unicode letters, numbers, white space", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  CHECK(x.matches("\\p{L}+", "h\u00e9llo \u4e16\u754c 123") == V{"h\u00e9llo", "\u4e16\u754c"});
  // Nd (Devanagari one and two, 3) and No (one half) are all \p{N}; \d is Nd only.
  CHECK(x.matches("\\p{N}+", "x\u0967\u09683\u00bd") == V{"\u0967\u09683\u00bd"});
  CHECK(x.matches("\\d+", "x\u0967\u09683\u00bd") == V{"\u0967\u09683"});
  CHECK(x.matches("\\P{L}+", "ab12cd") == V{"12"});
  CHECK(x.matches("[^\\s\\p{L}\\p{N}]+", "a!? b\u00a0\u3002") == V{"!?", "\u3002"});
  // \s is White_Space: NBSP and the ideographic space count, U+200B (a format character) does not.
  CHECK(x.matches("\\s+", "a\u00a0\u3000b\u200bc") == V{"\u00a0\u3000"});
}

TEST_CASE("regex: anchors and lookahead", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  CHECK(x.spans("a", "aba") == S{{0, 1}, {2, 3}});
  CHECK(x.spans("^a", "aba") == S{{0, 1}});
  CHECK(x.spans("a$", "aba") == S{{2, 3}});
  CHECK(x.spans("^a", "ab\nab") == S{{0, 1}, {3, 4}});  // ^ and $ are line anchors
  CHECK(x.spans("b$", "ab\nab") == S{{1, 2}, {4, 5}});
  CHECK(x.spans("a(?=b)", "acab") == S{{2, 3}});
  CHECK(x.spans("a(?!b)", "acab") == S{{0, 1}});
  CHECK(x.spans("\\s+(?!\\S)", "a   b") == S{{1, 3}});  // backs off one space so the lookahead holds
  // search() finds the leftmost match at or after `from`.
  const Regex re = x.compile("b+");
  const Subject s("abbcb");
  RegexScratch sc;
  int b = -1, e = -1;
  REQUIRE(re.search(s.input(), 0, b, e, sc));
  CHECK(std::pair(b, e) == std::pair(1, 3));
  REQUIRE(re.search(s.input(), 3, b, e, sc));
  CHECK(std::pair(b, e) == std::pair(4, 5));
  CHECK_FALSE(re.search(s.input(), 5, b, e, sc));
}

TEST_CASE("regex: GPT-2 pre-tokenizer splits", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  // "  123": \s+(?!\S) takes the first space only, so " 123" keeps its space.
  CHECK(x.matches(kGpt2, "Hello world's  123 !!") == V{"Hello", " world", "'s", " ", " 123", " !!"});
  CHECK(x.matches(kGpt2, "a  ") == V{"a", "  "});  // trailing white space in one piece
  CHECK(x.matches(kGpt2, "I'm") == V{"I", "'m"});
  CHECK(x.matches(kGpt2, "I'M") == V{"I", "'", "M"});  // GPT-2's contractions are case-sensitive
  CHECK(x.matches(kGpt2, "x\n\ny") == V{"x", "\n", "\n", "y"});  // no optional newline before a word
}

TEST_CASE("regex: Llama 3 pre-tokenizer splits", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  CHECK(x.matches(kLlama3, "I'LL pay 12345 now!\n\nOk") ==
        V{"I", "'LL", " pay", " ", "123", "45", " now", "!\n\n", "Ok"});
  CHECK(x.matches(kLlama3, "a\n\n b") == V{"a", "\n\n", " b"});
  CHECK(x.matches(kLlama3, "(x)") == V{"(x", ")"});  // one non-letter may lead a word
}

TEST_CASE("regex: engine details", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  using V = std::vector<std::string>;
  CHECK(x.matches("\\p{N}{1,3}", "a1234567b") == V{"123", "456", "7"});
  CHECK(x.matches("\\s+(?!\\S)|\\s+", "a   b") == V{"  ", " "});
  CHECK(x.matches("(?i:'s|'ll)", "'S 'lL 'ſ") == V{"'S", "'lL", "'ſ"});
  CHECK(x.matches("\\s+$", "a  \nb  ") == V{"  ", "  "});
  CHECK(x.matches("x*", "abxxc") == V{"", "", "xx", ""});
  CHECK(x.matches("[\\p{L}&&[^a-c]]+", "abcdefa") == V{"def"});
  CHECK(x.matches("a{,2}?b", "aaab") == V{"aab"});
  CHECK(x.matches("(?>a+)b|a+", "aaa") == V{"aaa"});
  CHECK(x.matches("[一-龥]+", "x中文y") == V{"中文"});
  CHECK(x.matches("(a|)*b", "aab") == V{"aab"});
  // Case folding applies before negation; \w is Oniguruma's (² yes, ① no).
  CHECK(x.matches("(?i:[^a-z]+)", "abXY12") == V{"12"});
  CHECK(x.matches("\\w+", "a\u00b2\u2460b\u24b6") == V{"a\u00b2", "b\u24b6"});
  CHECK(x.matches("\\d+", "1\u0663\u00b2") == V{"1\u0663"});
  CHECK(x.matches("(?m:.+)", "a\nb") == V{"a\nb"});
  CHECK(x.matches(".+", "a\nb") == V{"a", "b"});
  CHECK(x.matches("^\\w", "ab\ncd") == V{"a", "c"});
  if (x.e == RegexEngine::Own) CHECK(Regex::compile("a{2,1}", x.e).status().code() == Code::format_error);
  CHECK(Regex::compile("[a", x.e).status().code() == Code::format_error);
  CHECK(Regex::compile("a)", x.e).status().code() == Code::format_error);
}

namespace {

// Runs every match of `re` over `text`; the Status of the walk and the seconds it took.
struct Walk {
  Status status;
  S spans;
  double seconds = 0;
};
Walk walk(const Regex& re, const std::string& text) {
  const Subject s(text);
  RegexScratch sc;
  Walk w;
  const auto t0 = std::chrono::steady_clock::now();
  w.status = re.for_each_match(s.input(), sc, [&](int b, int e) { w.spans.emplace_back(b, e); });
  w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return w;
}

}  // namespace

TEST_CASE("regex: pathological patterns end in bounded time or are refused", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  const int n = 100000;
  const std::string spaces_x = std::string(n, ' ') + "x";
  struct Case {
    std::string pattern, text;
    S expected;  // the matches when the engine finishes
  };
  const std::vector<Case> cases = {
      // Exponential for plain backtracking: the only match is the empty one at the very end.
      {"(\\s*)+$", spaces_x, S{{n + 1, n + 1}}},
      {"(a|a)*b", std::string(40, 'a') + "c", S{}},
      {"(a*)*b", std::string(5000, 'a'), S{}},
      {"((a+)+)+!", std::string(3000, 'a') + "?", S{}},
      {"(?:\\s*\\s*)*y", spaces_x, S{}},
  };
  for (const Case& c : cases) {
    INFO(c.pattern);
    const Walk w = walk(x.compile(c.pattern), c.text);
    INFO(w.status.to_string() << " in " << w.seconds << " s");
    CHECK(w.seconds < 20.0);  // generous: a refusal takes well under a second here
    if (w.status.ok()) {
      CHECK(w.spans == c.expected);
    } else {
      CHECK(w.status.code() == Code::resource_exhausted);
      CHECK(w.status.message().find("refused") != std::string::npos);
      for (const auto& sp : w.spans) CHECK(std::find(c.expected.begin(), c.expected.end(), sp) != c.expected.end());
    }
  }
  // The own engine has no cleverness that could rescue these: it must refuse them.
  if (x.e == RegexEngine::Own)
    CHECK(walk(x.compile("(\\s*)+$"), spaces_x).status.code() == Code::resource_exhausted);
}

TEST_CASE("regex: the step budget leaves long ordinary inputs alone", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  const int n = 200000;
  // GPT-2 on a long space run: all but the last space, then " x" (as `tokenizers` splits it).
  const Walk a = walk(x.compile(kGpt2), std::string(n, ' ') + "x");
  INFO(a.status.to_string());
  REQUIRE(a.status.ok());
  CHECK(a.spans == S{{0, n - 1}, {n - 1, n + 1}});
  // One long word, long digit runs split by three, Llama 3's newline runs.
  const Walk b = walk(x.compile(kGpt2), std::string(n, 'a'));
  REQUIRE(b.status.ok());
  CHECK(b.spans == S{{0, n}});
  const Walk c = walk(x.compile(kLlama3), std::string(3 * 1000, '7') + std::string(n, '\n'));
  REQUIRE(c.status.ok());
  REQUIRE(c.spans.size() == 1001);
  CHECK(c.spans.back() == std::pair(3000, 3000 + n));
  // A search that walks far but linearly: a lookahead fails at each of n positions.
  const Walk d = walk(x.compile("a(?!a)"), std::string(n, 'a'));
  REQUIRE(d.status.ok());
  CHECK(d.spans == S{{n - 1, n}});
}

TEST_CASE("regex: patterns nested tens of thousands deep are refused, not a stack overflow", "[regex]") {
  const Engine x{GENERATE(from_range(engines()))};
  INFO(engine_name(x.e));
  const int d = 30000;
  auto rep = [](const std::string& s, int k) {
    std::string o;
    for (int i = 0; i < k; ++i) o += s;
    return o;
  };
  for (const std::string& p : {rep("(", d) + "a" + rep(")", d), rep("(?:", d) + "a" + rep(")", d),
                               rep("(?=", d) + "a" + rep(")", d), rep("[", d) + "a" + rep("]", d),
                               rep("(?i)", d) + "a", "a" + rep("{1}", d), "a" + rep("{1,2}", d)}) {
    INFO(p.substr(0, 12) << "... (" << p.size() << " chars)");
    auto r = Regex::compile(p, x.e);
    if (r.ok()) {  // an engine may accept a shape it can run without recursion: it must still match
      const Walk w = walk(*r, "aa");
      CHECK((w.status.ok() || w.status.code() == Code::resource_exhausted));
    } else {
      CHECK((r.status().code() == Code::format_error || r.status().code() == Code::unsupported));
    }
  }
  // Depth within the bounds still compiles.
  CHECK(x.matches(rep("(", 200) + "a" + rep(")", 200), "xa") == V{"a"});
  if (x.e == RegexEngine::Own) {
    auto r = Regex::compile(rep("(", d) + "a" + rep(")", d), x.e);
    REQUIRE(!r.ok());
    CHECK(r.status().message().find("nested") != std::string::npos);
  }
}

TEST_CASE("regex: Oniguruma adds lookbehind, scripts and back references", "[regex]") {
  if (!Regex::have_oniguruma()) {
    CHECK(Regex::compile("\\p{Han}").status().code() == Code::unsupported);
    CHECK(Regex::compile("(?<=a)b").status().code() == Code::unsupported);
    return;
  }
  const Engine x{RegexEngine::Oniguruma};
  CHECK(x.matches("\\p{Han}+", "x\u4e2d\u6587y\u3042\u4e00") == V{"\u4e2d\u6587", "\u4e00"});  // not the kana
  CHECK(x.matches("\\p{Hiragana}+|\\p{Katakana}+", "\u3042\u3044\u30a2x") == V{"\u3042\u3044", "\u30a2"});
  CHECK(x.matches("\\p{Greek}+", "abc\u03b1\u03b2") == V{"\u03b1\u03b2"});
  CHECK(x.spans("(?<=a)b", "abcb") == S{{1, 2}});
  CHECK(x.spans("(?<!a)b", "abcb") == S{{3, 4}});
  CHECK(x.spans("(?<=\u4e2d)\\p{Han}", "\u4e2d\u6587\u6587") == S{{1, 2}});
  CHECK(x.matches("(a)\\1", "aaba") == V{"aa"});
  // Full case folding, which the own engine lacks: ß matches SS.
  CHECK(x.matches("(?i)stra\u00dfe", "STRASSE") == V{"STRASSE"});
  // Windows: matches stay inside [lo, hi) and anchors see its ends.
  const Regex re = x.compile("^\\w+$");
  const Subject s("ab cd ef");
  RegexScratch sc;
  S out;
  REQUIRE(re.for_each_match(RegexInput{s.cp.data(), s.cat.data(), 3, 5}, sc, [&](int b, int e) { out.emplace_back(b, e); }).ok());
  CHECK(out == S{{3, 5}});
}

TEST_CASE("regex: the default engine is the own one, with Oniguruma behind it where the build has it", "[regex]") {
  auto re = Regex::compile(kGpt2);
  REQUIRE(re.ok());
  CHECK(re->engine() == RegexEngine::Own);
  CHECK(re->has_fallback() == Regex::have_oniguruma());
  // A pattern the own engine lacks (lookbehind): Oniguruma compiles it, or the own engine's refusal stands.
  auto lb = Regex::compile("(?<=a)b");
  if (Regex::have_oniguruma()) {
    REQUIRE(lb.ok());
    CHECK(lb->engine() == RegexEngine::Oniguruma);
    const Subject s("ab b ab");
    RegexScratch sc;
    std::vector<std::pair<int, int>> got;
    REQUIRE(lb->for_each_match(s.input(), sc, [&](int b, int e) { got.emplace_back(b, e); }).ok());
    CHECK(got == S{{1, 2}, {6, 7}});
  } else {
    CHECK(lb.status().code() == Code::unsupported);
  }
  // A search over the own engine's budget: Oniguruma finishes it (no match, no error); without it, a refusal.
  auto amb = Regex::compile("(a|a)*b");
  REQUIRE(amb.ok());
  const Subject s(std::string(3000, 'a') + "c");
  RegexScratch sc;
  int b = 0, e = 0;
  const bool found = amb->search(s.input(), 0, b, e, sc);
  CHECK_FALSE(found);
  if (Regex::have_oniguruma()) CHECK(sc.status.ok());
  else CHECK(sc.status.code() == Code::resource_exhausted);
}
