#include "secrets/sealed.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "common/fd.h"
#include "common/file_util.h"

namespace airlock::secrets {
namespace {

struct SealCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using SealCtxPtr = std::unique_ptr<EVP_CIPHER_CTX, SealCtxFree>;

const unsigned char* SealBytes(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }
unsigned char* SealBytes(std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); }

Status CheckSealKey(const std::string& key32) {
  if (key32.size() != kSealKeyBytes)
    return InvalidArgument("a sealing key is 32 bytes, not " + std::to_string(key32.size()));
  return OkStatus();
}

std::string OctalMode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

StatusOr<std::string> Seal(const std::string& key32, const std::string& aad, const std::string& plaintext) {
  RETURN_IF_ERROR(CheckSealKey(key32));
  std::string out(kSealNonceBytes + plaintext.size() + kSealTagBytes, '\0');
  unsigned char* nonce = SealBytes(out);
  unsigned char* ct = nonce + kSealNonceBytes;
  unsigned char* tag = ct + plaintext.size();
  if (RAND_bytes(nonce, kSealNonceBytes) != 1) return Internal("RAND_bytes failed (no nonce)");
  SealCtxPtr ctx(EVP_CIPHER_CTX_new());
  int n = 0, m = 0;
  bool ok = ctx && EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kSealNonceBytes, nullptr) == 1 &&
            EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, SealBytes(key32), nonce) == 1 &&
            EVP_EncryptUpdate(ctx.get(), nullptr, &n, SealBytes(aad), static_cast<int>(aad.size())) == 1 &&
            EVP_EncryptUpdate(ctx.get(), ct, &n, SealBytes(plaintext), static_cast<int>(plaintext.size())) == 1 &&
            EVP_EncryptFinal_ex(ctx.get(), ct + n, &m) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kSealTagBytes, tag) == 1;
  if (!ok) return Internal("AES-256-GCM encryption failed");
  return out;
}

StatusOr<std::string> Unseal(const std::string& key32, const std::string& aad, const std::string& sealed) {
  RETURN_IF_ERROR(CheckSealKey(key32));
  if (sealed.size() < kSealNonceBytes + kSealTagBytes)
    return Status(StatusCode::kDataLoss,
                  "a sealed value is at least 28 bytes (nonce and tag), not " + std::to_string(sealed.size()));
  const size_t ct_len = sealed.size() - kSealNonceBytes - kSealTagBytes;
  const unsigned char* nonce = SealBytes(sealed);
  const unsigned char* ct = nonce + kSealNonceBytes;
  std::string tag = sealed.substr(kSealNonceBytes + ct_len);  // SET_TAG takes a non-const pointer
  std::string pt(ct_len, '\0');
  SealCtxPtr ctx(EVP_CIPHER_CTX_new());
  int n = 0, m = 0;
  bool ok = ctx && EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kSealNonceBytes, nullptr) == 1 &&
            EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, SealBytes(key32), nonce) == 1 &&
            EVP_DecryptUpdate(ctx.get(), nullptr, &n, SealBytes(aad), static_cast<int>(aad.size())) == 1 &&
            EVP_DecryptUpdate(ctx.get(), SealBytes(pt), &n, ct, static_cast<int>(ct_len)) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kSealTagBytes, tag.data()) == 1 &&
            EVP_DecryptFinal_ex(ctx.get(), SealBytes(pt) + n, &m) == 1;
  if (!ok) {
    Wipe(pt);
    return Status(StatusCode::kDataLoss, "the sealed value does not verify (another key, or a changed value)");
  }
  return pt;
}

std::string ClusterSecretAad(const std::string& name, const std::string& info) {
  return "airlock-cluster-secret-v2:" + name + "\n" + info;
}

StatusOr<std::string> NewSealKey() {
  std::string key(kSealKeyBytes, '\0');
  if (RAND_bytes(SealBytes(key), static_cast<int>(key.size())) != 1) return Internal("RAND_bytes failed (no key)");
  return key;
}

StatusOr<std::string> LoadKeyFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return ErrnoError("open key file " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + path);
  if (!S_ISREG(st.st_mode)) return FailedPrecondition(path + " is not a regular file (a key file must be one)");
  if ((st.st_mode & 077) != 0)
    return PermissionDenied(path + " is readable by group or others (mode " + OctalMode(st.st_mode) +
                            "): a key file must be mode 0600 (chmod 600 it)");
  if (st.st_uid != ::geteuid())
    return PermissionDenied(path + " is owned by uid " + std::to_string(st.st_uid) + ", not this user (uid " +
                            std::to_string(::geteuid()) + "): a key file must be its user's own");
  if (st.st_size != static_cast<off_t>(kSealKeyBytes))
    return Status(StatusCode::kDataLoss,
                  path + " must hold exactly 32 bytes (it holds " + std::to_string(st.st_size) + ")");
  std::string key(kSealKeyBytes, '\0');
  size_t got = 0;
  while (got < key.size()) {
    ssize_t r = ::read(fd.get(), key.data() + got, key.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("read " + path);
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got != kSealKeyBytes) {
    Wipe(key);
    return Status(StatusCode::kDataLoss, path + " must hold exactly 32 bytes (read " + std::to_string(got) + ")");
  }
  return key;
}

StatusOr<bool> CreateKeyFile(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return false;
  if (errno != ENOENT) return ErrnoError("stat " + path);
  ASSIGN_OR_RETURN(std::string key, NewSealKey());
  auto t = CreateTempSibling(path, 0600);
  if (!t.ok()) {
    Wipe(key);
    return t.status();
  }
  UniqueFd fd = std::move(t->fd);
  const std::string tmp = std::move(t->path);
  Status s = WriteAll(fd.get(), key, tmp);
  Wipe(key);
  if (s.ok() && ::fchmod(fd.get(), 0600) != 0) s = ErrnoError("fchmod " + tmp);
  if (s.ok() && ::fsync(fd.get()) != 0) s = ErrnoError("fsync " + tmp);
  fd.Reset();
  bool made = false;
  if (s.ok()) {
    // link: never replaces a file another process made meanwhile.
    if (::link(tmp.c_str(), path.c_str()) == 0) {
      made = true;
    } else if (errno != EEXIST) {
      s = ErrnoError("link " + tmp + " to " + path);
    }
  }
  ::unlink(tmp.c_str());
  RETURN_IF_ERROR(s);
  if (made) {
    const size_t slash = path.rfind('/');
    RETURN_IF_ERROR(FsyncDir(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash)));
  }
  return made;
}

std::string EncodeBase64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

StatusOr<std::string> DecodeBase64(std::string_view text) {
  if (text.size() % 4 != 0) return InvalidArgument("base64 text's length is not a multiple of 4");
  if (text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") !=
      std::string_view::npos)
    return InvalidArgument("base64 text holds a character outside the standard alphabet");
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return InvalidArgument("malformed base64 text");
  size_t len = static_cast<size_t>(n);
  // DecodeBlock keeps the padding's zero bytes: drop one per '='.
  size_t pad = 0;
  for (size_t i = text.size(); i > 0 && text[i - 1] == '=' && pad < 2; --i) ++pad;
  const size_t eq = text.find('=');
  if (eq != std::string_view::npos && eq < text.size() - pad) return InvalidArgument("'=' inside base64 text");
  if (pad > len) return InvalidArgument("malformed base64 padding");
  out.resize(len - pad);
  return out;
}

void Wipe(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

}  // namespace airlock::secrets
