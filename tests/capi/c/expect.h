/* The checks the C API test programs share: a count of checks and failures, and EXPECT, which
 * prints one line per call ("ok  " or "FAIL") and wants a failing call to leave a non-empty
 * message. Include after nnc.h; the program prints its totals and exits non-zero on failures
 * (tests/capi/test_capi.py reads both). */
#ifndef NNC_TEST_EXPECT_H
#define NNC_TEST_EXPECT_H

#include <stdio.h>

#include "nnc.h"

static int failures = 0, checks = 0;

/* Expect `call` to return `want`; a failure must also leave a non-empty message. */
#define EXPECT(call, want)                                                                \
    do {                                                                                  \
        int got_ = (call);                                                                \
        const char* msg_ = nnc_error_message();                                           \
        int ok_ = got_ == (want) && (got_ == NNC_SUCCESS || (msg_ && msg_[0]));          \
        checks++;                                                                         \
        if (!ok_) failures++;                                                             \
        printf("%s %s -> %d (want %d)%s%s\n", ok_ ? "ok  " : "FAIL", #call, got_, (want), \
               got_ ? ": " : "", got_ ? msg_ : "");                                       \
    } while (0)

#endif
