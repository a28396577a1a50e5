#include "util/aead.h"

#include <dlfcn.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <vector>

#include "util/bytes.h"
#include "util/check.h"
#include "util/params.h"

namespace mccl {
namespace {

// The few libcrypto entry points used, declared here (their C ABI is the
// same in OpenSSL 1.1 and 3.x) and resolved with dlsym.
struct Crypto {
  void* (*ctxNew)() = nullptr;
  void (*ctxFree)(void*) = nullptr;
  const void* (*aes256gcm)() = nullptr;
  int (*encInit)(void*, const void*, void*, const uint8_t*, const uint8_t*) = nullptr;
  int (*encUpdate)(void*, uint8_t*, int*, const uint8_t*, int) = nullptr;
  int (*encFinal)(void*, uint8_t*, int*) = nullptr;
  int (*decInit)(void*, const void*, void*, const uint8_t*, const uint8_t*) = nullptr;
  int (*decUpdate)(void*, uint8_t*, int*, const uint8_t*, int) = nullptr;
  int (*decFinal)(void*, uint8_t*, int*) = nullptr;
  int (*ctrl)(void*, int, int, void*) = nullptr;
  std::string error;  // why it is not loaded; empty when it is
};

constexpr int kCtrlGetTag = 0x10;  // EVP_CTRL_GCM_GET_TAG
constexpr int kCtrlSetTag = 0x11;  // EVP_CTRL_GCM_SET_TAG

const Crypto& crypto() {
  static Crypto c;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    const std::string configured = params::cryptoLibrary();
    if (!configured.empty()) {
      names.push_back(configured);
    } else {
      names = {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so",
               "/opt/homebrew/opt/openssl@3/lib/libcrypto.3.dylib",
               "/usr/local/opt/openssl@3/lib/libcrypto.3.dylib", "libcrypto.3.dylib"};
    }
    void* lib = nullptr;
    std::string tried;
    for (const auto& n : names) {
      lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      tried += strCat(tried.empty() ? "" : ", ", n);
    }
    if (!lib) {
      c.error = strCat("OpenSSL's libcrypto was not found (tried ", tried,
                       "; install libssl3 or openssl@3, or set MCCL_CRYPTO_LIBRARY to its path)");
      return;
    }
    auto sym = [&](const char* name) {
      void* p = ::dlsym(lib, name);
      if (!p && c.error.empty()) c.error = strCat("libcrypto lacks ", name);
      return p;
    };
    c.ctxNew = reinterpret_cast<void* (*)()>(sym("EVP_CIPHER_CTX_new"));
    c.ctxFree = reinterpret_cast<void (*)(void*)>(sym("EVP_CIPHER_CTX_free"));
    c.aes256gcm = reinterpret_cast<const void* (*)()>(sym("EVP_aes_256_gcm"));
    c.encInit = reinterpret_cast<decltype(c.encInit)>(sym("EVP_EncryptInit_ex"));
    c.encUpdate = reinterpret_cast<decltype(c.encUpdate)>(sym("EVP_EncryptUpdate"));
    c.encFinal = reinterpret_cast<decltype(c.encFinal)>(sym("EVP_EncryptFinal_ex"));
    c.decInit = reinterpret_cast<decltype(c.decInit)>(sym("EVP_DecryptInit_ex"));
    c.decUpdate = reinterpret_cast<decltype(c.decUpdate)>(sym("EVP_DecryptUpdate"));
    c.decFinal = reinterpret_cast<decltype(c.decFinal)>(sym("EVP_DecryptFinal_ex"));
    c.ctrl = reinterpret_cast<decltype(c.ctrl)>(sym("EVP_CIPHER_CTX_ctrl"));
  });
  return c;
}

// EVP lengths are ints: feed large buffers in pieces.
constexpr size_t kStep = size_t{1} << 30;

}  // namespace

bool Aead::available(std::string* why) {
  const Crypto& c = crypto();
  if (!c.error.empty()) *why = c.error;
  return c.error.empty();
}

Aead::Aead(const Digest& key) {
  const Crypto& c = crypto();
  MCCL_USAGE_CHECK(c.error.empty(), "MCCL_WIRE_SECURITY needs AES-GCM: ", c.error);
  sealCtx_ = c.ctxNew();
  openCtx_ = c.ctxNew();
  MCCL_CHECK(sealCtx_ && openCtx_, "EVP_CIPHER_CTX_new failed");
  MCCL_CHECK(c.encInit(sealCtx_, c.aes256gcm(), nullptr, key.data(), nullptr) == 1 &&
                 c.decInit(openCtx_, c.aes256gcm(), nullptr, key.data(), nullptr) == 1,
             "AES-256-GCM key setup failed");
}

Aead::~Aead() {
  const Crypto& c = crypto();
  if (sealCtx_) c.ctxFree(sealCtx_);
  if (openCtx_) c.ctxFree(openCtx_);
}

void Aead::nonce(uint8_t iv[12]) const {
  putLE<uint64_t>(iv, seq_);
  std::memset(iv + 8, 0, 4);
}

void Aead::beginSeal(const uint8_t* aad, size_t aadLen) {
  const Crypto& c = crypto();
  uint8_t iv[12];
  nonce(iv);
  ++seq_;
  int n = 0;
  MCCL_CHECK(c.encInit(sealCtx_, nullptr, nullptr, nullptr, iv) == 1 &&
                 c.encUpdate(sealCtx_, nullptr, &n, aad, static_cast<int>(aadLen)) == 1,
             "AES-GCM sealing failed");
}

void Aead::sealPiece(const uint8_t* data, size_t len, uint8_t* out) {
  const Crypto& c = crypto();
  int n = 0;
  for (size_t done = 0; done < len; done += kStep) {
    const int step = static_cast<int>(std::min(kStep, len - done));
    MCCL_CHECK(c.encUpdate(sealCtx_, out ? out + done : nullptr, &n, data + done, step) == 1,
               "AES-GCM sealing failed");
  }
}

void Aead::endSeal(uint8_t tag[kAeadTagBytes]) {
  const Crypto& c = crypto();
  uint8_t none[16];
  int n = 0;
  MCCL_CHECK(c.encFinal(sealCtx_, none, &n) == 1 &&
                 c.ctrl(sealCtx_, kCtrlGetTag, static_cast<int>(kAeadTagBytes), tag) == 1,
             "AES-GCM sealing failed");
}

void Aead::seal(const uint8_t* aad, size_t aadLen, const uint8_t* data, size_t len, uint8_t* out,
                uint8_t tag[kAeadTagBytes]) {
  beginSeal(aad, aadLen);
  sealPiece(data, len, out);
  endSeal(tag);
}

void Aead::beginOpen(const uint8_t* aad, size_t aadLen) {
  const Crypto& c = crypto();
  uint8_t iv[12];
  nonce(iv);
  ++seq_;
  int n = 0;
  openOk_ = c.decInit(openCtx_, nullptr, nullptr, nullptr, iv) == 1 &&
            c.decUpdate(openCtx_, nullptr, &n, aad, static_cast<int>(aadLen)) == 1;
}

void Aead::openPiece(uint8_t* data, size_t len, bool decrypt) {
  const Crypto& c = crypto();
  int n = 0;
  for (size_t done = 0; openOk_ && done < len; done += kStep) {
    const int step = static_cast<int>(std::min(kStep, len - done));
    openOk_ = decrypt ? c.decUpdate(openCtx_, data + done, &n, data + done, step) == 1
                      : c.decUpdate(openCtx_, nullptr, &n, data + done, step) == 1;
  }
}

bool Aead::endOpen(const uint8_t tag[kAeadTagBytes]) {
  const Crypto& c = crypto();
  uint8_t t[kAeadTagBytes];
  std::memcpy(t, tag, sizeof(t));
  uint8_t none[16];
  int n = 0;
  return openOk_ && c.ctrl(openCtx_, kCtrlSetTag, static_cast<int>(kAeadTagBytes), t) == 1 &&
         c.decFinal(openCtx_, none, &n) > 0;
}

bool Aead::open(const uint8_t* aad, size_t aadLen, uint8_t* data, size_t len, bool decrypt,
                const uint8_t tag[kAeadTagBytes]) {
  beginOpen(aad, aadLen);
  openPiece(data, len, decrypt);
  return endOpen(tag);
}

}  // namespace mccl
