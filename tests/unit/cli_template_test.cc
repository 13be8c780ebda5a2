// `airlock template build` without a daemon: the Dockerfile → steps parser
// (src/cli/dockerfile.h, the SDK's fromDockerfile) and the COPY files
// (src/cli/template_files.h: entries, .dockerignore, files hash, archive).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli/dockerfile.h"
#include "cli/template_files.h"
#include "common/subprocess.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::cli {
namespace {

using nlohmann::json;
using templates::Step;
using templates::StepType;
using Args = std::vector<std::string>;

DockerfileTemplate MustParse(const std::string& text) {
  auto t = ParseDockerfile(text);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? *t : DockerfileTemplate{};
}

// The user's steps: without the two leading defaults (USER root, WORKDIR /).
std::vector<Step> UserSteps(const DockerfileTemplate& t) {
  EXPECT_GE(t.start.steps.size(), 2u);
  if (t.start.steps.size() < 2) return {};
  return std::vector<Step>(t.start.steps.begin() + 2, t.start.steps.end());
}

void ExpectStep(const Step& s, StepType type, const Args& args) {
  EXPECT_EQ(s.type, type) << templates::StepTypeName(s.type);
  EXPECT_EQ(s.args, args);
}

TEST(Dockerfile, StartsAsRootInSlashAndEndsAsUserInHome) {
  auto t = MustParse("FROM e2bdev/base\nRUN true\n");
  EXPECT_EQ(t.start.from_image, "e2bdev/base");
  EXPECT_EQ(t.start.from_template, "");
  ASSERT_EQ(t.start.steps.size(), 5u);
  ExpectStep(t.start.steps[0], StepType::kUser, {"root"});
  ExpectStep(t.start.steps[1], StepType::kWorkdir, {"/"});
  ExpectStep(t.start.steps[2], StepType::kRun, {"true"});
  ExpectStep(t.start.steps[3], StepType::kUser, {"user"});
  ExpectStep(t.start.steps[4], StepType::kWorkdir, {"/home/user"});
  EXPECT_EQ(t.start.start_cmd, "");
  EXPECT_EQ(t.start.ready_cmd, "");
}

TEST(Dockerfile, RunShellAndExecForms) {
  auto t = MustParse(
      "FROM base\n"
      "RUN apt-get update && apt-get install -y curl\n"
      "RUN [\"echo\", \"hello world\", \"it's\", \"$HOME\"]\n"
      "run echo lower-case keyword\n");
  auto s = UserSteps(t);
  ASSERT_EQ(s.size(), 5u);
  ExpectStep(s[0], StepType::kRun, {"apt-get update && apt-get install -y curl"});
  // The exec form runs the program with those exact arguments: shell-quoted.
  ExpectStep(s[1], StepType::kRun, {"echo 'hello world' 'it'\"'\"'s' '$HOME'"});
  ExpectStep(s[2], StepType::kRun, {"echo lower-case keyword"});
  // A RUN whose JSON is broken is the shell form, as in Docker.
  t = MustParse("FROM base\nRUN [not json\n");
  ExpectStep(UserSteps(t)[0], StepType::kRun, {"[not json"});
}

TEST(Dockerfile, LineContinuationsAndComments) {
  auto t = MustParse(
      "# syntax=docker/dockerfile:1\n"
      "  # an indented comment\n"
      "\n"
      "FROM e2bdev/base\n"
      "RUN apt-get update && \\\n"
      "    # a comment inside the continuation is dropped\n"
      "\n"
      "    apt-get install -y \\\n"
      "      curl git\n"
      "ENV A=1 \\\n"
      "    B=2\n"
      "RUN echo '# not a comment'   \n");
  auto s = UserSteps(t);
  ASSERT_EQ(s.size(), 5u);
  ExpectStep(s[0], StepType::kRun, {"apt-get update && apt-get install -y curl git"});
  ExpectStep(s[1], StepType::kEnv, {"A", "1", "B", "2"});
  ExpectStep(s[2], StepType::kRun, {"echo '# not a comment'"});
  // The escape directive changes the continuation character.
  t = MustParse("# escape=`\nFROM base\nRUN echo a `\n  b\nWORKDIR C:\\app\n");
  s = UserSteps(t);
  ExpectStep(s[0], StepType::kRun, {"echo a b"});
  ExpectStep(s[1], StepType::kWorkdir, {"C:\\app"});
  // CRLF line ends.
  t = MustParse("FROM base\r\nRUN a \\\r\n  b\r\n");
  ExpectStep(UserSteps(t)[0], StepType::kRun, {"a b"});
}

TEST(Dockerfile, CopyOneStepPerSourceWithOwnerAndMode) {
  auto t = MustParse(
      "FROM base\n"
      "COPY --chown=user:user app req.txt \"my file\" /app/\n"
      "ADD --chmod=755 bin/run.sh /usr/local/bin/run\n"
      "COPY [\"a b\", \"/x y/\"]\n"
      "COPY --link conf /etc/conf\n");
  auto s = UserSteps(t);
  ASSERT_EQ(s.size(), 8u);
  ExpectStep(s[0], StepType::kCopy, {"app", "/app/", "user:user", ""});
  ExpectStep(s[1], StepType::kCopy, {"req.txt", "/app/", "user:user", ""});
  ExpectStep(s[2], StepType::kCopy, {"my file", "/app/", "user:user", ""});
  ExpectStep(s[3], StepType::kCopy, {"bin/run.sh", "/usr/local/bin/run", "", "0755"});
  ExpectStep(s[4], StepType::kCopy, {"a b", "/x y/", "", ""});
  ExpectStep(s[5], StepType::kCopy, {"conf", "/etc/conf", "", ""});
  for (const char* bad : {"COPY --from=builder /out /out", "COPY /etc/passwd /x", "COPY ../secret /x",
                          "COPY a/../../b /x", "COPY onlyone", "ADD https://example.invalid/x /x",
                          "COPY --chmod=rwx a /a", "COPY --parents a /a", "COPY <<EOF /x"}) {
    auto r = ParseDockerfile(std::string("FROM base\n") + bad + "\n");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("line 2:"), std::string::npos) << r.status().message();
    }
  }
  EXPECT_TRUE(ParseDockerfile("FROM base\nCOPY a/../b ./c /x/\n").ok());
}

TEST(Dockerfile, EnvBothFormsAndArg) {
  auto t = MustParse(
      "ARG VERSION\n"
      "FROM base\n"
      "ARG MODE=fast OTHER\n"
      "ENV A=1 B=\"two words\" C='$NOT' D=a\\ b\n"
      "ENV LEGACY some value  here\n"
      "ENV QUOTED \"x  y\"\n"
      "ENV PATH=$PATH:/opt/bin\n"
      "ENV A=1 A=2\n");
  auto s = UserSteps(t);
  ASSERT_EQ(s.size(), 9u);
  ExpectStep(s[0], StepType::kEnv, {"VERSION", ""});
  ExpectStep(s[1], StepType::kEnv, {"MODE", "fast", "OTHER", ""});
  ExpectStep(s[2], StepType::kEnv, {"A", "1", "B", "two words", "C", "$NOT", "D", "a b"});
  ExpectStep(s[3], StepType::kEnv, {"LEGACY", "some value  here"});
  ExpectStep(s[4], StepType::kEnv, {"QUOTED", "x  y"});
  ExpectStep(s[5], StepType::kEnv, {"PATH", "$PATH:/opt/bin"});  // the server evaluates it in the guest
  ExpectStep(s[6], StepType::kEnv, {"A", "2"});
  for (const char* bad : {"ENV", "ENV LONELY", "ENV A=1 B", "ENV =x", "ENV A=\"open"}) {
    EXPECT_FALSE(ParseDockerfile(std::string("FROM base\n") + bad + "\n").ok()) << bad;
  }
}

TEST(Dockerfile, EachStepKnowsItsLine) {
  auto t = MustParse("FROM base\n# c\nRUN a \\\n  b\nCOPY x y /d/\n");
  EXPECT_EQ(t.step_lines, (std::vector<size_t>{0, 0, 3, 5, 5, 0, 0}));
}

TEST(Dockerfile, WorkdirUserAndTheirDefaults) {
  auto t = MustParse("FROM base\nWORKDIR /srv/app\nUSER nobody\nRUN id\n");
  ASSERT_EQ(t.start.steps.size(), 5u);  // no USER user / WORKDIR /home/user at the end
  auto s = UserSteps(t);
  ExpectStep(s[0], StepType::kWorkdir, {"/srv/app"});
  ExpectStep(s[1], StepType::kUser, {"nobody"});
  ExpectStep(s[2], StepType::kRun, {"id"});
  // Only the one not set gets its default.
  t = MustParse("FROM base\nUSER app\n");
  ASSERT_EQ(t.start.steps.size(), 4u);
  ExpectStep(t.start.steps[3], StepType::kWorkdir, {"/home/user"});
  t = MustParse("FROM base\nWORKDIR \"/with space\"\n");
  ExpectStep(t.start.steps[2], StepType::kWorkdir, {"/with space"});
  ExpectStep(t.start.steps[3], StepType::kUser, {"user"});
  EXPECT_FALSE(ParseDockerfile("FROM base\nUSER a b\n").ok());
  EXPECT_FALSE(ParseDockerfile("FROM base\nWORKDIR\n").ok());
  // Variables are not substituted outside ENV: said, not hidden.
  t = MustParse("FROM base\nWORKDIR $HOME/app\n");
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find("line 2: WORKDIR"), std::string::npos) << t.warnings[0];
}

TEST(Dockerfile, CmdAndEntrypointBecomeTheStartCommand) {
  auto t = MustParse("FROM base\nCMD [\"python\", \"-m\", \"http.server\", \"8000\"]\n");
  EXPECT_EQ(t.start.start_cmd, "python -m http.server 8000");
  EXPECT_EQ(t.start.ready_cmd, "sleep 20");
  t = MustParse("FROM base\nCMD [\"sh\", \"-c\", \"echo $HOME && sleep 1\"]\n");
  EXPECT_EQ(t.start.start_cmd, "sh -c 'echo $HOME && sleep 1'");
  t = MustParse("FROM base\nCMD node server.js --port 3000\n");
  EXPECT_EQ(t.start.start_cmd, "node server.js --port 3000");
  // The last CMD counts; an exec-form ENTRYPOINT takes CMD as arguments.
  t = MustParse("FROM base\nCMD [\"a\"]\nENTRYPOINT [\"python\", \"app.py\"]\nCMD [\"--port\", \"80\"]\n");
  EXPECT_EQ(t.start.start_cmd, "python app.py --port 80");
  t = MustParse("FROM base\nENTRYPOINT exec serve\nCMD [\"ignored\"]\n");
  EXPECT_EQ(t.start.start_cmd, "exec serve");
}

TEST(Dockerfile, FromMultiStageAndOtherInstructions) {
  auto t = MustParse("FROM --platform=linux/amd64 python:3.12 AS app\n");
  EXPECT_EQ(t.start.from_image, "python:3.12");
  EXPECT_EQ(t.warnings.size(), 1u);
  t = MustParse("FROM template:my-tpl:v1\n");
  EXPECT_EQ(t.start.from_template, "my-tpl:v1");
  EXPECT_EQ(t.start.from_image, "");
  auto multi = ParseDockerfile("FROM golang AS build\nRUN go build\nFROM base\nCOPY app /app\n");
  ASSERT_FALSE(multi.ok());
  EXPECT_NE(multi.status().message().find("line 3: multi-stage"), std::string::npos) << multi.status().message();
  EXPECT_FALSE(ParseDockerfile("RUN true\n").ok());  // no FROM
  EXPECT_FALSE(ParseDockerfile("").ok());
  EXPECT_FALSE(ParseDockerfile("FROM base\nFROBNICATE x\n").ok());
  EXPECT_FALSE(ParseDockerfile("FROM base\nRUN cat <<EOF > /x\nhi\nEOF\n").ok());
  EXPECT_FALSE(ParseDockerfile("FROM base\nRUN --mount=type=secret,id=x cat /run/secrets/x\n").ok());
  t = MustParse("FROM base\nRUN --mount=type=cache,target=/root/.cache pip install x\nRUN cat <<< hi\n");
  ExpectStep(UserSteps(t)[0], StepType::kRun, {"pip install x"});
  ExpectStep(UserSteps(t)[1], StepType::kRun, {"cat <<< hi"});
  t = MustParse("FROM base\nEXPOSE 80\nVOLUME /data\nLABEL a=b\nHEALTHCHECK NONE\n");
  EXPECT_EQ(t.start.steps.size(), 4u);
  EXPECT_EQ(t.warnings.size(), 2u);  // LABEL, HEALTHCHECK; EXPOSE and VOLUME silently
}

TEST(Dockerfile, TheBodyIsWhatTheServerAccepts) {
  auto t = MustParse(
      "FROM e2bdev/base\nRUN echo hi\nCOPY --chown=user app /app/\nENV A=1\nWORKDIR /app\nUSER user\n"
      "CMD [\"python\", \"-m\", \"http.server\"]\n");
  for (auto& s : t.start.steps) {
    if (s.type == StepType::kCopy) s.files_hash = std::string(64, 'a');
  }
  t.start.force = true;
  json body = BuildStartJson(t.start);
  EXPECT_EQ(body["fromImage"], "e2bdev/base");
  EXPECT_FALSE(body.contains("fromTemplate"));
  EXPECT_EQ(body["startCmd"], "python -m http.server");
  EXPECT_EQ(body["readyCmd"], "sleep 20");
  EXPECT_EQ(body["force"], true);
  EXPECT_EQ(body["steps"][3], (json{{"type", "COPY"}, {"args", {"app", "/app/", "user", ""}}, {"force", false},
                                    {"filesHash", std::string(64, 'a')}}));
  auto parsed = templates::ParseBuildStart(body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->steps.size(), t.start.steps.size());
}

TEST(TemplateFiles, DockerignoreMatching) {
  const std::vector<std::string> p = {"*.log", "build", "**/node_modules", "docs/**/*.md", "!docs/keep.md",
                                      "docs/*.md"};
  EXPECT_TRUE(Ignored(p, "debug.log"));
  EXPECT_FALSE(Ignored(p, "app/debug.log"));  // *.log is the top level only
  EXPECT_TRUE(Ignored(p, "build"));
  EXPECT_TRUE(Ignored(p, "build/out/x.o"));  // below an ignored directory
  EXPECT_TRUE(Ignored(p, "node_modules/a/index.js"));
  EXPECT_TRUE(Ignored(p, "web/node_modules"));
  EXPECT_TRUE(Ignored(p, "docs/a/b.md"));
  EXPECT_TRUE(Ignored(p, "docs/keep.md"));  // the last match decides: docs/*.md
  EXPECT_FALSE(Ignored({"docs/*.md", "!docs/keep.md"}, "docs/keep.md"));
  EXPECT_FALSE(Ignored(p, "src/main.cc"));
}

TEST(TemplateFiles, EntriesHashAndArchive) {
  test_util::ScopedDir dir{test_util::MakeTempDir("cli-template-test")};
  ASSERT_FALSE(dir.path.empty());
  const std::string ctx = dir.path + "/ctx";
  namespace fs = std::filesystem;
  fs::create_directories(ctx + "/app/sub");
  auto write = [&](const std::string& rel, const std::string& data) {
    std::ofstream(ctx + "/" + rel, std::ios::binary) << data;
  };
  write("app/main.py", "print('hi')\n");
  write("app/sub/x.txt", "x\n");
  write("app/debug.log", "noise\n");
  write("app/.hidden", "h\n");
  write("req.txt", "flask\n");
  write(".dockerignore", "# comment\n\napp/*.log\n");
  ASSERT_EQ(::symlink("main.py", (ctx + "/app/link.py").c_str()), 0);
  const auto ignore = ReadDockerignore(ctx);
  ASSERT_EQ(ignore, std::vector<std::string>{"app/*.log"});

  auto e = CopyEntries(ctx, "app/", ignore);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(*e, (std::vector<std::string>{"app", "app/.hidden", "app/link.py", "app/main.py", "app/sub",
                                          "app/sub/x.txt"}));
  e = CopyEntries(ctx, "app/*.py", ignore);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(*e, (std::vector<std::string>{"app/link.py", "app/main.py"}));
  e = CopyEntries(ctx, "./req.txt", ignore);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, std::vector<std::string>{"req.txt"});
  e = CopyEntries(ctx, ".", ignore);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 8u);  // everything but app/debug.log, no "." entry
  EXPECT_EQ(CopyEntries(ctx, "missing", ignore).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(CopyEntries(ctx, "*.none", ignore).status().code(), StatusCode::kNotFound);

  // The hash: stable, and it moves with content, mode, and the step's text.
  auto entries = *CopyEntries(ctx, "app", ignore);
  auto h1 = FilesHash(ctx, "app", "/app/", entries);
  ASSERT_TRUE(h1.ok()) << h1.status().message();
  EXPECT_EQ(h1->size(), 64u);
  EXPECT_EQ(*FilesHash(ctx, "app", "/app/", entries), *h1);
  EXPECT_NE(*FilesHash(ctx, "app", "/srv/", entries), *h1);
  write("app/sub/x.txt", "y\n");
  auto h2 = *FilesHash(ctx, "app", "/app/", entries);
  EXPECT_NE(h2, *h1);
  ASSERT_EQ(::chmod((ctx + "/app/sub/x.txt").c_str(), 0600), 0);
  auto h3 = *FilesHash(ctx, "app", "/app/", entries);
  EXPECT_NE(h3, h2);
  // mtime is not hashed (a fresh checkout hashes the same).
  fs::last_write_time(ctx + "/app/main.py", fs::file_time_type::clock::now() - std::chrono::hours(5));
  EXPECT_EQ(*FilesHash(ctx, "app", "/app/", entries), h3);

  // The archive holds exactly the entries, gzipped, the symlink kept.
  const std::string archive = dir.path + "/a.tar.gz";
  ASSERT_TRUE(WriteArchive(ctx, entries, archive).ok());
  std::ifstream f(archive, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  f.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  auto listing = RunChecked({"tar", "-tvzf", archive});
  ASSERT_TRUE(listing.ok()) << listing.status().message();
  EXPECT_EQ(listing->find("debug.log"), std::string::npos) << *listing;
  EXPECT_NE(listing->find("app/link.py -> main.py"), std::string::npos) << *listing;
  auto names = RunChecked({"tar", "-tzf", archive});
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, "app/\napp/.hidden\napp/link.py\napp/main.py\napp/sub/\napp/sub/x.txt\n");
}

}  // namespace
}  // namespace airlock::cli
