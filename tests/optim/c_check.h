/* The C API tests' check: a failed condition is printed with terse_last_error() and counted in
 * `failures`, and the test goes on (main returns failures != 0). One copy per test program. */
#ifndef TERSE_TESTS_OPTIM_C_CHECK_H
#define TERSE_TESTS_OPTIM_C_CHECK_H

#include <terse/terse.h>

#include <stdio.h>

static int failures = 0;
#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (%s)\n", __FILE__, __LINE__, #cond, \
              terse_last_error());                                                 \
      ++failures;                                                                  \
    }                                                                              \
  } while (0)

#endif
