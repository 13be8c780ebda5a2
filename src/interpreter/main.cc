// airlock-interpreter: the code-interpreter server on port 49999 in the
// guest (docs/code-interpreter.md).
//
//   airlock-interpreter [--listen IP:PORT] [--kernels PATH] [--user NAME]
//                       [--cwd DIR] [--envd URL] [--runtime-dir DIR]
//                       [--max-output-bytes N] [--access-token-file PATH] [--verbose]
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "interpreter/interpreter.h"
#include "interpreter/log.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: airlock-interpreter [--listen IP:PORT] [--kernels PATH] [--user NAME] [--cwd DIR]\n"
               "                           [--envd URL] [--runtime-dir DIR] [--max-output-bytes N] [--console PATH]\n"
               "                           [--access-token-file PATH] [--verbose]\n"
               "  --listen IP:PORT        address to serve on (default 0.0.0.0:49999; port 0 = any)\n"
               "  --kernels PATH          kernel table (default /usr/local/lib/airlock/interpreter/kernels.json)\n"
               "  --user NAME             kernels run as this user when the server is root (default user)\n"
               "  --cwd DIR               default working directory of contexts (default /home/user)\n"
               "  --envd URL              envd, for the sandbox's env vars (default http://127.0.0.1:49983)\n"
               "  --runtime-dir DIR       connection files (default /run/airlock-interpreter)\n"
               "  --max-output-bytes N    output cap per execution (default 67108864)\n"
               "  --console PATH          write \"airlock-interpreter: ready\" there once the default python\n"
               "                          kernel is ready (the guest's /dev/console)\n"
               "  --access-token-file PATH  the sandbox's access token, as the agent writes it at /init: every\n"
               "                          request but /health and the /contexts routes needs it in\n"
               "                          X-Access-Token (default /run/airlock/access-token; a missing file:\n"
               "                          no token yet; \"\" = no check)\n"
               "  --verbose               debug logging\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace airlock::interpreter;
  Options o;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "airlock-interpreter: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--listen") o.listen = value();
    else if (a == "--kernels") o.kernels = value();
    else if (a == "--user") o.user = value();
    else if (a == "--cwd") o.cwd = value();
    else if (a == "--envd") o.envd = value();
    else if (a == "--runtime-dir") o.runtime_dir = value();
    else if (a == "--console") o.console = value();
    else if (a == "--access-token-file") o.access_token_file = value();
    else if (a == "--max-output-bytes") {
      std::string v = value();
      char* end = nullptr;
      unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1024) {
        std::fprintf(stderr, "airlock-interpreter: --max-output-bytes needs a number >= 1024\n");
        return 2;
      }
      o.max_output_bytes = static_cast<size_t>(n);
    } else if (a == "--verbose") verbose = true;
    else if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "airlock-interpreter: unknown flag '%s'\n", a.c_str());
      Usage();
      return 2;
    }
  }
  SetLogVerbose(verbose);
  ::signal(SIGPIPE, SIG_IGN);

  auto table = LoadKernelTable(o.kernels);
  if (!table.ok()) {
    LogError("%s", table.status().ToString().c_str());
    return 1;
  }
  auto user = ResolveKernelUser(o.user);
  if (!user.ok()) {
    LogError("%s", user.status().ToString().c_str());
    return 1;
  }
  try {
    boost::asio::io_context io(1);
    Interpreter server(io, o, std::move(table).value(), std::move(user).value());
    boost::asio::signal_set stop(io, SIGTERM, SIGINT);
    stop.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      LogInfo("signal %d: stopping", sig);
      server.Shutdown();
      io.stop();
    });
    if (airlock::Status st = server.Start(); !st.ok()) {
      LogError("%s", st.ToString().c_str());
      return 1;
    }
    LogInfo("listening on %s (port %u), kernels %s", o.listen.c_str(), server.port(), o.kernels.c_str());
    std::fprintf(stderr, "airlock-interpreter: ready port=%u\n", server.port());
    io.run();
  } catch (const std::exception& e) {
    LogError("fatal: %s", e.what());
    return 1;
  }
  return 0;
}
