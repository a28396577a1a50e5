// The job secret: what a rank must know to join a group, when the rendezvous
// store is not trusted with it (MCCL_SECRET_FILE or MCCL_SECRET).
//
// Without one, rank 0 draws each group's secret and publishes it in the
// store, so whoever can read the store can join (docs/security.md). With
// one, the store carries only a random salt, and each group's secret is
// HMAC(job secret, salt | group id): the store never sees anything that
// lets a reader pass the handshake.
#pragma once

#include <cstdint>
#include <optional>

#include "transport/handshake.h"

namespace mccl {

// Reads MCCL_SECRET_FILE / MCCL_SECRET. Throws a usage error naming the
// variable when the file is missing, not a regular file, readable or
// writable by its group or others, shorter than 32 bytes (or the text
// shorter than 32 characters), or when both are set. Empty when neither is.
std::optional<Secret> loadJobSecret();

// The key a job secret derives from file contents or text.
Secret deriveJobSecret(const void* data, size_t len);

// A group's handshake secret from the job secret and the store's salt.
Secret groupSecret(const Secret& job, uint64_t group, const Secret& salt);

}  // namespace mccl
