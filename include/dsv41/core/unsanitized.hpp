// DSV41_UNSANITIZED marks the CPU backend's innermost loops (the dot product, a weight row's dequantization and
// the format conversions it calls):
// a build that defines DSV41_UNSANITIZED_HOT_LOOPS leaves them out of ASan and UBSan (the CLI under sanitizers,
// whose model runs would otherwise be ~3-12x slower); elsewhere, the unit suite included, it expands to nothing.
#pragma once

#if defined(DSV41_UNSANITIZED_HOT_LOOPS) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define DSV41_UNSANITIZED __attribute__((no_sanitize("address", "undefined")))
#else
#define DSV41_UNSANITIZED
#endif
