// `airlock run` end to end: every test boots real microVMs (TCG here).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/harness.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;

struct AgentTask {
  std::string name;
  std::string interpreter;
  std::vector<std::string> inputs;  // extra files uploaded to /home/user
  bool artefacts = false;           // downloads /home/user/out
};

void RunAgentTask(const AgentTask& t) {
  std::string ex = ExamplesDir();
  std::string out_dir = MakeTempDir();
  std::vector<std::string> args = {"run", "--upload", ex + "/" + t.name + ":/home/user/" + t.name};
  for (const auto& in : t.inputs) {
    args.push_back("--upload");
    args.push_back(ex + "/" + in + ":/home/user/" + in);
  }
  if (t.artefacts) {
    args.push_back("--download");
    args.push_back("/home/user/out:" + out_dir + "/out");
  }
  args.insert(args.end(), {"--", t.interpreter, "/home/user/" + t.name});
  CliResult r = RunCli(args);
  EXPECT_EQ(r.out, ReadFileOrDie(ex + "/expected/" + t.name + ".stdout"));
  if (fs::exists(ex + "/expected/" + t.name + ".stderr")) {
    EXPECT_EQ(r.err, ReadFileOrDie(ex + "/expected/" + t.name + ".stderr"));
  }
  EXPECT_EQ(std::to_string(r.code) + "\n", ReadFileOrDie(ex + "/expected/" + t.name + ".exit")) << r.err;
  if (t.artefacts) {
    std::string csv = ReadFileOrDie(out_dir + "/out/revenue_by_region.csv");
    EXPECT_EQ(csv.substr(0, 16), "region,revenue\r\n");  // csv.writer ends rows with CRLF
    EXPECT_NE(csv.find("east,272.42"), std::string::npos) << csv;
    std::string svg = ReadFileOrDie(out_dir + "/out/revenue_by_region.svg");
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  }
  fs::remove_all(out_dir);
}

TEST(AgentTaskTest, SalesReportPython) {
  AIRLOCK_REQUIRE_VM();
  RunAgentTask({"sales_report.py", "python3", {"sales.csv"}, true});
}

TEST(AgentTaskTest, WordFreqNode) {
  AIRLOCK_REQUIRE_VM();
  RunAgentTask({"word_freq.mjs", "node", {"input.txt"}, false});
}

TEST(AgentTaskTest, InventorySqlitePython) {
  AIRLOCK_REQUIRE_VM();
  RunAgentTask({"inventory_sqlite.py", "python3", {}, false});
}

TEST(AgentTaskTest, LogPipelineBash) {
  AIRLOCK_REQUIRE_VM();
  RunAgentTask({"log_pipeline.sh", "bash", {}, false});
}

TEST(RunTest, GuestRunsItsOwnKernel) {
  AIRLOCK_REQUIRE_VM();
  CliResult r = RunCli({"run", "--", "uname", "-r"});
  ASSERT_EQ(r.code, 0) << r.err;
  utsname host;
  ::uname(&host);
  EXPECT_NE(r.out, std::string(host.release) + "\n");
  if (RuntimeName() == "gvisor") {
    // The Sentry is the guest's kernel: it reports its own Linux version.
    EXPECT_EQ(r.out, "4.4.0\n");
  } else {
    EXPECT_NE(r.out.find("cloud-amd64"), std::string::npos) << r.out;
  }
}

TEST(RunTest, StdoutAndStderrStayApart) {
  AIRLOCK_REQUIRE_VM();
  CliResult r = RunCli({"run", "--", "bash", "-c", "echo out; echo err >&2; echo out2"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "out\nout2\n");
  EXPECT_EQ(r.err, "err\n");
}

TEST(RunTest, StdinIsForwarded) {
  AIRLOCK_REQUIRE_VM();
  std::string input;
  for (int i = 0; i < 5000; ++i) input += "line " + std::to_string(i) + "\n";
  CliResult r = RunCli({"run", "-i", "--", "bash", "-c", "wc -l; true"}, input);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "5000\n");
}

TEST(RunTest, ExitCodesAndSignals) {
  AIRLOCK_REQUIRE_VM();
  EXPECT_EQ(RunCli({"run", "--", "bash", "-c", "exit 42"}).code, 42);
  EXPECT_EQ(RunCli({"run", "--", "bash", "-c", "kill -TERM $$"}).code, 128 + 15);
  EXPECT_EQ(RunCli({"run", "--", "bash", "-c", "kill -KILL $$"}).code, 128 + 9);
}

TEST(RunTest, CommandNotFoundIs127) {
  AIRLOCK_REQUIRE_VM();
  CliResult r = RunCli({"run", "--", "no-such-command-xyz"});
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(r.err.find("no-such-command-xyz"), std::string::npos) << r.err;
}

TEST(RunTest, TimeoutKillsTheCommand) {
  AIRLOCK_REQUIRE_VM();
  auto t0 = std::chrono::steady_clock::now();
  CliResult r = RunCli({"run", "--timeout", "2", "--", "bash", "-c", "while :; do :; done"});
  EXPECT_EQ(r.code, 128 + 9) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(90));
}

TEST(RunTest, BinaryOutputIsByteExact) {
  AIRLOCK_REQUIRE_VM();
  // 1 MB of random bytes (invalid UTF-8 included) and its checksum on stderr.
  CliResult r = RunCli({"run", "--", "bash", "-c",
                        "head -c 1000000 /dev/urandom > /tmp/r; cat /tmp/r; sha256sum < /tmp/r | cut -d' ' -f1 >&2"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.out.size(), 1000000u);
  std::string tmp = MakeTempDir() + "/r";
  std::ofstream(tmp, std::ios::binary) << r.out;
  auto sum = RunChecked({"sha256sum", tmp});
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->substr(0, 64) + "\n", r.err);
  fs::remove_all(fs::path(tmp).parent_path());
}

TEST(RunTest, LargeOutputStreamsWithBoundedMemory) {
  AIRLOCK_REQUIRE_VM();
  // 200 MB through the stream; we keep only a count (max_output bounds the capture).
  long peak_kib = 0;
  CliResult r = RunCli({"run", "--", "bash", "-c", "head -c 200000000 /dev/zero; echo done >&2"}, "", 1 << 20,
                       [&](pid_t pid) { peak_kib = std::max(peak_kib, PeakRssKib(pid)); });
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "done\n");
  // airlock run's own peak RSS (the VMM is another process): far below 200 MB.
  EXPECT_GT(peak_kib, 0);
  EXPECT_LT(peak_kib, 64 * 1024) << "peak RSS of airlock run: " << peak_kib << " KiB";
}

TEST(RunTest, FilesRoundTripBinaryNestedNonAscii) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  std::string blob;
  for (int i = 0; i < 3 * 1024 * 1024; ++i) blob.push_back(static_cast<char>((i * 131 + i / 977) & 0xff));
  std::ofstream(dir + "/blob.bin", std::ios::binary) << blob;
  std::ofstream(dir + "/näme ünïcode ✓.txt", std::ios::binary) << "héllo\n";
  CliResult r = RunCli({"run",
                        "--upload", dir + "/blob.bin:/home/user/in/deep/er/blob.bin",
                        "--upload", dir + "/näme ünïcode ✓.txt:/home/user/in/näme ünïcode ✓.txt",
                        "--download", "/home/user/in:" + dir + "/back",
                        "--", "bash", "-c", "ls -R /home/user/in >/dev/null && sha256sum /home/user/in/deep/er/blob.bin"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFileOrDie(dir + "/back/deep/er/blob.bin"), blob);
  EXPECT_EQ(ReadFileOrDie(dir + "/back/näme ünïcode ✓.txt"), "héllo\n");
  fs::remove_all(dir);
}

TEST(RunTest, BadInputGetsClearErrors) {
  CliResult r = RunCli({"run", "--upload", "nocolon", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("SRC:DST"), std::string::npos) << r.err;
  r = RunCli({"run", "--upload", "/nonexistent/file:/home/user/x", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/file"), std::string::npos) << r.err;
  r = RunCli({"run"});
  EXPECT_EQ(r.code, 2);
  AIRLOCK_REQUIRE_VM();
  r = RunCli({"run", "--template", "no-such-template", "--", "true"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("no-such-template"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace airlock::testing
