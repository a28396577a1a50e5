// AES-256-GCM for authenticated frames (MCCL_WIRE_SECURITY), from the
// system's OpenSSL libcrypto (1.1 or 3.x), loaded at run time with dlopen:
// MCCL builds and runs without it, and only a job that asks for wire
// security needs it. OpenSSL's GCM uses AES-NI and PCLMULQDQ on x86 and the
// ARMv8 crypto extensions on Apple silicon; it is on every Debian and
// Ubuntu system (libssl3, which Python's ssl module links) and on a Mac
// through Homebrew (openssl@3) or MCCL_CRYPTO_LIBRARY.
//
// One Aead seals or opens the frames of one direction of one connection:
// the nonce is the frame's sequence number in that direction (never sent;
// both ends count), so a replayed, dropped, reordered or injected frame
// fails its tag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/sha256.h"

namespace mccl {

constexpr size_t kAeadTagBytes = 16;

class Aead {
 public:
  // Whether libcrypto could be loaded (once); when not, *why says why.
  static bool available(std::string* why);

  // Throws a usage error naming MCCL_WIRE_SECURITY when libcrypto is missing.
  explicit Aead(const Digest& key);
  ~Aead();
  Aead(const Aead&) = delete;
  Aead& operator=(const Aead&) = delete;

  // Seals the next frame: the tag covers `aad` and `data`. With `out`
  // (encrypt) the ciphertext of `data` is written there (len bytes); without
  // (integrity) `data` is only authenticated.
  void seal(const uint8_t* aad, size_t aadLen, const uint8_t* data, size_t len, uint8_t* out,
            uint8_t tag[kAeadTagBytes]);
  // Opens the next frame in place (decrypting `data` when `decrypt`);
  // false when the tag does not match (the frame was forged, altered,
  // replayed or reordered).
  bool open(const uint8_t* aad, size_t aadLen, uint8_t* data, size_t len, bool decrypt,
            const uint8_t tag[kAeadTagBytes]);
  uint64_t frames() const { return seq_; }

  // The same in pieces, so a large payload is sealed (or opened) while the
  // network moves the piece before: beginSeal, sealPiece per piece (out
  // null: authenticate only), endSeal; beginOpen, openPiece, endOpen.
  void beginSeal(const uint8_t* aad, size_t aadLen);
  void sealPiece(const uint8_t* data, size_t len, uint8_t* out);
  void endSeal(uint8_t tag[kAeadTagBytes]);
  void beginOpen(const uint8_t* aad, size_t aadLen);
  void openPiece(uint8_t* data, size_t len, bool decrypt);
  bool endOpen(const uint8_t tag[kAeadTagBytes]);

 private:
  void nonce(uint8_t iv[12]) const;
  void* sealCtx_ = nullptr;
  void* openCtx_ = nullptr;
  uint64_t seq_ = 0;
  bool openOk_ = false;
};

}  // namespace mccl
