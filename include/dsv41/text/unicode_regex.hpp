// The regex engines of the pre-tokenizer and normalizer patterns of Hugging Face tokenizer.json
// files. With DSV41_HAVE_ONIGURUMA (the dsv41::onig target) Regex::compile uses Oniguruma, the
// engine of the `tokenizers` package, so the syntax and the matches are the same by construction
// (regex_onig.hpp). Otherwise, or with RegexEngine::Own, a small backtracking engine over code
// points runs them. It follows Oniguruma's syntax as `tokenizers` uses it: leftmost match,
// ordered alternation, greedy/lazy/possessive quantifiers, \p{..} general categories (from
// utf8proc), \s as Unicode White_Space, \d as Nd, \w as Oniguruma's word set, ^/$ as line
// anchors, . without newline unless (?m), lookahead, atomic groups, (?i) with one-to-one case
// folding, nested classes and && intersection. Not supported by it (compile returns
// `unsupported`): back references, lookbehind, script properties such as \p{Han} (utf8proc has
// no script data), POSIX brackets, (?x). Known difference: (?i) does not fold one code point to
// several (Oniguruma matches "straße" with "STRASSE").
//
// Bounded work: the own engine stops a search (or one for_each_match walk) after
// Regex::step_budget steps, linear in the text and the program size, with resource_exhausted;
// patterns such as (\s*)+$ that backtrack exponentially are refused instead of running for ever.
// Oniguruma runs under per-search retry and stack limits (regex_onig.hpp). The own engine refuses
// patterns nested more than 1000 groups or classes deep (or 4000 tree levels with stacked
// quantifiers) at compile time; libonig has its own parse-depth limit (4096).
//
// The parts: unicode_props.hpp (categories, folding), regex_matcher.hpp (Regex and its matcher),
// regex_parser.hpp (pattern to tree), regex_compiler.hpp (tree to program, Regex::compile),
// regex_onig.hpp (the Oniguruma engine).
#pragma once
#include <dsv41/text/regex_compiler.hpp>
#include <dsv41/text/regex_matcher.hpp>
#include <dsv41/text/regex_parser.hpp>
#include <dsv41/text/unicode_props.hpp>
