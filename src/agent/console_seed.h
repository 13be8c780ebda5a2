// Fresh entropy before the guest's first TCP handshake (docs/snapshots.md
// "Fresh before the first TCP"). Every sandbox restored from one snapshot
// starts with the same kernel CRNG state, and Linux draws its TCP secrets
// (net_secret, ts_secret) once per boot at the first TCP use; the host's
// first TCP packet to the agent would draw them from that shared state. So
// the host reseeds the guest over its serial console first, a channel that
// needs no guest network:
//
//   host → guest (console input):  "airlock-seed <nonce> <entropy>\n"
//   guest → host (console output): "airlock-agent: seeded <nonce>\n"
//                             or: "airlock-agent: seed failed <nonce>: <why>\n"
//
// <nonce> is 16..64 lowercase hex digits (the host's, echoed so that it
// knows which request was done); <entropy> is standard base64 of
// kMinEntropyBytes..kMaxEntropyBytes bytes. Anything else on the console
// input (line noise, a line cut by a reset UART, an overlong line) is
// dropped without an answer; a line is at most kMaxSeedLineBytes.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::agent {

inline constexpr size_t kMaxSeedLineBytes = 1024;
inline constexpr char kSeededMarker[] = "airlock-agent: seeded ";
inline constexpr char kSeedFailedMarker[] = "airlock-agent: seed failed ";
// The guest's serial console (console=ttyS0 on the kernel command line).
inline constexpr char kSeedConsole[] = "/dev/ttyS0";

struct SeedRequest {
  std::string nonce;    // 16..64 lowercase hex digits
  std::string entropy;  // the decoded bytes
};

// Parses one line (without its '\n'; a trailing '\r' is allowed).
// InvalidArgument naming what is wrong.
StatusOr<SeedRequest> ParseSeedLine(std::string_view line);

// Reads seed lines from a terminal (the guest's /dev/ttyS0) on the agent's
// io_context, reseeds with each valid one and answers on the same terminal
// (the fd it reads: no open of /dev/console on the way, which under TCG is
// translation time the host waits for).
class ConsoleSeedReader {
 public:
  // reseed: mixes the bytes in and reseeds the CRNG (ReseedEntropy).
  using Reseed = std::function<Status(std::string_view bytes)>;
  ConsoleSeedReader(boost::asio::io_context& io, Reseed reseed);

  // Opens `tty` (O_RDWR | O_NOCTTY), turns off echo, line editing and
  // signal characters on its input (so the entropy is never echoed to the
  // console output) and starts reading. An errno status naming the path.
  Status Start(const std::string& tty);
  // Starts reading (and answering on) an fd already open (tests: a pty's slave side).
  Status StartFd(UniqueFd fd);

 private:
  void ReadMore();
  void OnBytes(std::string_view bytes);
  void OnLine(std::string_view line);
  void Answer(const std::string& line);

  boost::asio::posix::stream_descriptor stream_;
  Reseed reseed_;
  std::string line_;
  bool overlong_ = false;  // dropping the rest of a line over kMaxSeedLineBytes
  char buf_[256];
};

}  // namespace airlock::agent
