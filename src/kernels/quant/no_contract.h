// Include first (before any other header) in files that must round exactly like ggml's C
// reference code: it stops the compiler from fusing a*b+c into one FMA, which rounds once instead
// of twice and would change e.g. nearest_int(iscale * x). Applies to the rest of the file.
#pragma once
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
