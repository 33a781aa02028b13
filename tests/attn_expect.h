/* The attention tests' failure count and EXPECT (each test is one file,
 * with the harness of attn_check.h): fails adds up the failed EXPECTs and
 * what attn_check returns; main returns fails != 0. */
#ifndef GGMLITE_ATTN_EXPECT_H
#define GGMLITE_ATTN_EXPECT_H

#include <stdio.h>

static int fails;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

#endif
