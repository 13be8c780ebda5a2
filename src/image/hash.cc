#include "image/hash.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "common/fd.h"
#include "common/hex.h"

namespace airlock::image {
namespace {

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return HexEncode(md, n);
}

StatusOr<std::string> Sha256File(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return Internal("EVP_DigestInit_ex(sha256) failed");
  }
  std::string buf(1 << 20, '\0');
  for (;;) {
    ssize_t r = ::read(fd.get(), buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read " + path);
    }
    if (r == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(r));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  return HexEncode(md, n);
}

KeyBuilder& KeyBuilder::Add(std::string_view name, std::string_view value) {
  buf_.append(name);
  buf_.push_back('\0');
  buf_.append(value);
  buf_.push_back('\0');
  return *this;
}

KeyBuilder& KeyBuilder::Add(std::string_view name, const std::vector<std::string>& values) {
  std::string joined;
  for (const auto& v : values) {
    joined.append(std::to_string(v.size()));
    joined.push_back(':');
    joined.append(v);
  }
  return Add(name, joined);
}

std::string KeyBuilder::Digest() const { return Sha256Hex(buf_); }

}  // namespace airlock::image
