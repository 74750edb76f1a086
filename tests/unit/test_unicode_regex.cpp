// The regex engine of the pre-tokenizers (dsv41::text::Regex): syntax, Unicode classes, anchors,
// lookahead, quantifier modes, and the GPT-2 and Llama 3 split patterns on hand-derived splits.
#include <catch2/catch.hpp>

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

// Every match of `pattern` in `text`, as for_each_match walks them.
std::vector<std::string> matches(const std::string& pattern, const std::string& text) {
  auto re = Regex::compile(pattern);
  REQUIRE(re.ok());
  const Subject s(text);
  RegexScratch sc;
  std::vector<std::string> out;
  re->for_each_match(s.input(), sc, [&](int b, int e) { out.push_back(s.text(b, e)); });
  return out;
}

// The (start, end) code-point spans of every match.
std::vector<std::pair<int, int>> spans(const std::string& pattern, const std::string& text) {
  auto re = Regex::compile(pattern);
  REQUIRE(re.ok());
  const Subject s(text);
  RegexScratch sc;
  std::vector<std::pair<int, int>> out;
  re->for_each_match(s.input(), sc, [&](int b, int e) { out.emplace_back(b, e); });
  return out;
}

using V = std::vector<std::string>;
using S = std::vector<std::pair<int, int>>;

const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

TEST_CASE("regex: ordered alternation, classes and quantifier modes", "[regex]") {
  CHECK(matches("a|ab", "ab") == V{"a"});  // the first alternative that matches, not the longest
  CHECK(matches("ab|a", "ab") == V{"ab"});
  CHECK(matches("[a-c]+", "abxcba") == V{"ab", "cba"});
  CHECK(matches("[^a-c]+", "abxcba") == V{"x"});
  CHECK(matches("[a-c&&[^b]]", "abc") == V{"a", "c"});
  CHECK(matches("a+?", "aaa") == V{"a", "a", "a"});
  CHECK(matches("a{2}", "aaaaa") == V{"aa", "aa"});
  CHECK(matches("a{2,}", "a aa aaa") == V{"aa", "aaa"});
  CHECK(matches("a++a", "aaa").empty());  // possessive: gives nothing back
  CHECK(matches("a+a", "aaa") == V{"aaa"});
  CHECK(matches("(?i)AbC", "xabcABC") == V{"abc", "ABC"});
  CHECK(matches("colou?r", "color colour colouur") == V{"color", "colour"});
  CHECK(matches("a.c", "abc a\nc") == V{"abc"});
  CHECK(matches(Regex::escape("a.b*c"), "xa.b*cx aXbbc") == V{"a.b*c"});
}

TEST_CASE("regex: Unicode letters, numbers, white space", "[regex]") {
  CHECK(matches("\\p{L}+", "h\u00e9llo \u4e16\u754c 123") == V{"h\u00e9llo", "\u4e16\u754c"});
  // Nd (Devanagari one and two, 3) and No (one half) are all \p{N}; \d is Nd only.
  CHECK(matches("\\p{N}+", "x\u0967\u09683\u00bd") == V{"\u0967\u09683\u00bd"});
  CHECK(matches("\\d+", "x\u0967\u09683\u00bd") == V{"\u0967\u09683"});
  CHECK(matches("\\P{L}+", "ab12cd") == V{"12"});
  CHECK(matches("[^\\s\\p{L}\\p{N}]+", "a!? b\u00a0\u3002") == V{"!?", "\u3002"});
  // \s is White_Space: NBSP and the ideographic space count, U+200B (a format character) does not.
  CHECK(matches("\\s+", "a\u00a0\u3000b\u200bc") == V{"\u00a0\u3000"});
}

TEST_CASE("regex: anchors and lookahead", "[regex]") {
  CHECK(spans("a", "aba") == S{{0, 1}, {2, 3}});
  CHECK(spans("^a", "aba") == S{{0, 1}});
  CHECK(spans("a$", "aba") == S{{2, 3}});
  CHECK(spans("^a", "ab\nab") == S{{0, 1}, {3, 4}});  // ^ and $ are line anchors
  CHECK(spans("b$", "ab\nab") == S{{1, 2}, {4, 5}});
  CHECK(spans("a(?=b)", "acab") == S{{2, 3}});
  CHECK(spans("a(?!b)", "acab") == S{{0, 1}});
  CHECK(spans("\\s+(?!\\S)", "a   b") == S{{1, 3}});  // backs off one space so the lookahead holds
  // search() finds the leftmost match at or after `from`.
  auto re = Regex::compile("b+");
  REQUIRE(re.ok());
  const Subject s("abbcb");
  RegexScratch sc;
  int b = -1, e = -1;
  REQUIRE(re->search(s.input(), 0, b, e, sc));
  CHECK(std::pair(b, e) == std::pair(1, 3));
  REQUIRE(re->search(s.input(), 3, b, e, sc));
  CHECK(std::pair(b, e) == std::pair(4, 5));
  CHECK_FALSE(re->search(s.input(), 5, b, e, sc));
}

TEST_CASE("regex: GPT-2 pre-tokenizer splits", "[regex]") {
  // "  123": \s+(?!\S) takes the first space only, so " 123" keeps its space.
  CHECK(matches(kGpt2, "Hello world's  123 !!") == V{"Hello", " world", "'s", " ", " 123", " !!"});
  CHECK(matches(kGpt2, "a  ") == V{"a", "  "});  // trailing white space in one piece
  CHECK(matches(kGpt2, "I'm") == V{"I", "'m"});
  CHECK(matches(kGpt2, "I'M") == V{"I", "'", "M"});  // GPT-2's contractions are case-sensitive
  CHECK(matches(kGpt2, "x\n\ny") == V{"x", "\n", "\n", "y"});  // no optional newline before a word
}

TEST_CASE("regex: Llama 3 pre-tokenizer splits", "[regex]") {
  CHECK(matches(kLlama3, "I'LL pay 12345 now!\n\nOk") ==
        V{"I", "'LL", " pay", " ", "123", "45", " now", "!\n\n", "Ok"});
  CHECK(matches(kLlama3, "a\n\n b") == V{"a", "\n\n", " b"});
  CHECK(matches(kLlama3, "(x)") == V{"(x", ")"});  // one non-letter may lead a word
}

TEST_CASE("regex: engine details", "[regex]") {
  using V = std::vector<std::string>;
  CHECK(matches("\\p{N}{1,3}", "a1234567b") == V{"123", "456", "7"});
  CHECK(matches("\\s+(?!\\S)|\\s+", "a   b") == V{"  ", " "});
  CHECK(matches("(?i:'s|'ll)", "'S 'lL 'ſ") == V{"'S", "'lL", "'ſ"});
  CHECK(matches("\\s+$", "a  \nb  ") == V{"  ", "  "});
  CHECK(matches("x*", "abxxc") == V{"", "", "xx", ""});
  CHECK(matches("[\\p{L}&&[^a-c]]+", "abcdefa") == V{"def"});
  CHECK(matches("a{,2}?b", "aaab") == V{"aab"});
  CHECK(matches("(?>a+)b|a+", "aaa") == V{"aaa"});
  CHECK(matches("[一-龥]+", "x中文y") == V{"中文"});
  CHECK(matches("(a|)*b", "aab") == V{"aab"});
  // Case folding applies before negation; \w is Oniguruma's (² yes, ① no).
  CHECK(matches("(?i:[^a-z]+)", "abXY12") == V{"12"});
  CHECK(matches("\\w+", "a\u00b2\u2460b\u24b6") == V{"a\u00b2", "b\u24b6"});
  CHECK(matches("\\d+", "1\u0663\u00b2") == V{"1\u0663"});
  CHECK(matches("(?m:.+)", "a\nb") == V{"a\nb"});
  CHECK(matches(".+", "a\nb") == V{"a", "b"});
  CHECK(matches("^\\w", "ab\ncd") == V{"a", "c"});
  CHECK(Regex::compile("a{2,1}").status().code() == Code::format_error);
  CHECK(Regex::compile("(?<=a)b").status().code() == Code::unsupported);
  CHECK(Regex::compile("[a").status().code() == Code::format_error);
  CHECK(Regex::compile("a)").status().code() == Code::format_error);
}
