// Invariant checks that print both operands (in the manner of GLOO_ENFORCE_EQ).
//
// MCCL_CHECK* report a broken invariant inside MCCL (ErrorKind::kInternal).
// MCCL_USAGE_CHECK reports bad input from the caller (ErrorKind::kUsage).
#pragma once

#include "util/error.h"

#define MCCL_CHECK(cond, ...)                                               \
  do {                                                                      \
    if (!(cond)) {                                                          \
      ::mccl::throwError(::mccl::ErrorKind::kInternal, __FILE__, ":",       \
                         __LINE__, ": check failed: " #cond " " __VA_OPT__(, ) \
                         __VA_ARGS__);                                      \
    }                                                                       \
  } while (0)

#define MCCL_CHECK_OP_(a, b, op)                                            \
  do {                                                                      \
    const auto& mccl_a_ = (a);                                              \
    const auto& mccl_b_ = (b);                                              \
    if (!(mccl_a_ op mccl_b_)) {                                            \
      ::mccl::throwError(::mccl::ErrorKind::kInternal, __FILE__, ":",       \
                         __LINE__, ": check failed: " #a " " #op " " #b     \
                         " (", mccl_a_, " vs ", mccl_b_, ")");              \
    }                                                                       \
  } while (0)

#define MCCL_CHECK_EQ(a, b) MCCL_CHECK_OP_(a, b, ==)
#define MCCL_CHECK_NE(a, b) MCCL_CHECK_OP_(a, b, !=)
#define MCCL_CHECK_LE(a, b) MCCL_CHECK_OP_(a, b, <=)
#define MCCL_CHECK_LT(a, b) MCCL_CHECK_OP_(a, b, <)
#define MCCL_CHECK_GE(a, b) MCCL_CHECK_OP_(a, b, >=)

#define MCCL_USAGE_CHECK(cond, ...)                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      ::mccl::throwError(::mccl::ErrorKind::kUsage, __VA_ARGS__);     \
    }                                                                 \
  } while (0)
