// FUZZ_CHECK(condition): the fuzz targets' assertion. It aborts (a crash to
// libFuzzer, a failure to the replay test) in every build mode, NDEBUG too.
#ifndef RDMARPC_TESTS_FUZZ_FUZZ_CHECK_H_
#define RDMARPC_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                          \
  do {                                                                 \
    if (!(condition)) {                                                \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, \
                   __LINE__, #condition);                              \
      std::abort();                                                    \
    }                                                                  \
  } while (0)

#endif  // RDMARPC_TESTS_FUZZ_FUZZ_CHECK_H_
