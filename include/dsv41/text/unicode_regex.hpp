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
//
// The parts: unicode_props.hpp (categories, folding), regex_matcher.hpp (Regex and its matcher),
// regex_parser.hpp (pattern to tree), regex_compiler.hpp (tree to program, Regex::compile).
#pragma once
#include <dsv41/text/regex_compiler.hpp>
#include <dsv41/text/regex_matcher.hpp>
#include <dsv41/text/regex_parser.hpp>
#include <dsv41/text/unicode_props.hpp>
