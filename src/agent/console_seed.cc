#include "agent/console_seed.h"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>

#include "agent/entropy.h"
#include "agent/log.h"
#include "envd/proto_json.h"

namespace airlock::agent {
namespace {

constexpr std::string_view kSeedVerb = "airlock-seed ";
constexpr size_t kMinNonce = 16, kMaxNonce = 64;
constexpr int kMaxLoggedRejects = 8;  // the rest are dropped silently

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

StatusOr<SeedRequest> ParseSeedLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() > kMaxSeedLineBytes) return InvalidArgument("seed line too long");
  if (line.substr(0, kSeedVerb.size()) != kSeedVerb) return InvalidArgument("not a seed line");
  line.remove_prefix(kSeedVerb.size());
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return InvalidArgument("seed line: no entropy");
  std::string_view nonce = line.substr(0, space), b64 = line.substr(space + 1);
  if (nonce.size() < kMinNonce || nonce.size() > kMaxNonce || !IsLowerHex(nonce)) {
    return InvalidArgument("seed line: the nonce must be 16..64 lowercase hex digits");
  }
  if (b64.find(' ') != std::string_view::npos) return InvalidArgument("seed line: trailing fields");
  auto bytes = envd::Base64Decode(b64);
  if (!bytes.ok()) return InvalidArgument("seed line: entropy is not base64");
  if (bytes->size() < kMinEntropyBytes || bytes->size() > kMaxEntropyBytes) {
    return InvalidArgument("seed line: entropy must be " + std::to_string(kMinEntropyBytes) + ".." +
                           std::to_string(kMaxEntropyBytes) + " bytes");
  }
  return SeedRequest{std::string(nonce), std::move(bytes).value()};
}

ConsoleSeedReader::ConsoleSeedReader(boost::asio::io_context& io, Reseed reseed)
    : stream_(io), reseed_(std::move(reseed)) {}

Status ConsoleSeedReader::Start(const std::string& tty) {
  UniqueFd fd(::open(tty.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) return ErrnoError("open " + tty);
  termios t{};
  if (::tcgetattr(fd.get(), &t) != 0) return ErrnoError("tcgetattr " + tty);
  // Input only: no echo (the entropy must not come back out on the console),
  // no line editing or signal characters, no CR/LF translation. Output
  // processing (the kernel's and our console lines) stays as it is.
  t.c_lflag &= ~(ECHO | ECHOE | ECHOK | ECHONL | ICANON | ISIG | IEXTEN);
  t.c_iflag &= ~(IXON | IXOFF | ICRNL | INLCR | IGNCR | ISTRIP | BRKINT);
  t.c_cc[VMIN] = 1;
  t.c_cc[VTIME] = 0;
  if (::tcsetattr(fd.get(), TCSANOW, &t) != 0) return ErrnoError("tcsetattr " + tty);
  return StartFd(std::move(fd));
}

Status ConsoleSeedReader::StartFd(UniqueFd fd) {
  boost::system::error_code ec;
  stream_.assign(fd.Release(), ec);
  if (ec) return Internal("console seed reader: " + ec.message());
  ReadMore();
  return OkStatus();
}

void ConsoleSeedReader::ReadMore() {
  stream_.async_read_some(boost::asio::buffer(buf_), [this](const boost::system::error_code& ec, size_t n) {
    if (ec == boost::asio::error::operation_aborted) return;
    if (ec) {
      // A tty read error (hang-up) is not worth a busy loop: stop reading.
      LogError("console seed reader: %s", ec.message().c_str());
      return;
    }
    OnBytes(std::string_view(buf_, n));
    ReadMore();
  });
}

void ConsoleSeedReader::OnBytes(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n') {
      if (!overlong_) OnLine(line_);
      line_.clear();
      overlong_ = false;
    } else if (!overlong_) {
      line_.push_back(c);
      if (line_.size() > kMaxSeedLineBytes) {
        line_.clear();
        overlong_ = true;
      }
    }
  }
}

void ConsoleSeedReader::OnLine(std::string_view line) {
  static int rejects = 0;
  if (line.empty() || line == "\r") return;
  auto req = ParseSeedLine(line);
  if (!req.ok()) {
    if (rejects++ < kMaxLoggedRejects) LogError("console: %s", req.status().message().c_str());
    return;
  }
  if (Status st = reseed_(req->entropy); !st.ok()) {
    Answer(kSeedFailedMarker + req->nonce + ": " + st.message());
    return;
  }
  Answer(kSeededMarker + req->nonce);
}

void ConsoleSeedReader::Answer(const std::string& line) {
  // A few dozen bytes into the tty's output buffer: a non-blocking write
  // that does not take them all means the console is jammed (a process
  // flooding it); the host writes its line again and is answered then.
  const std::string l = line + "\n";
  ssize_t n = ::write(stream_.native_handle(), l.data(), l.size());
  if (n != static_cast<ssize_t>(l.size())) LogError("console seed: answer not written (%zd of %zu)", n, l.size());
}

}  // namespace airlock::agent
