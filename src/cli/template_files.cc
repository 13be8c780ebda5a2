#include "cli/template_files.h"

#include <fnmatch.h>
#include <glob.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "common/hex.h"
#include "common/subprocess.h"

namespace airlock::cli {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string seg = path.substr(i, j - i);
    if (seg == "..") {
      if (!out.empty()) out.pop_back();
    } else if (!seg.empty() && seg != ".") {
      out.push_back(seg);
    }
    i = j + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& segs, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < segs.size(); ++i) out += (i ? "/" : "") + segs[i];
  return out;
}

// Lexically clean: no "." or empty segments, no leading or trailing "/".
std::string Clean(const std::string& path) {
  auto segs = Segments(path);
  return Join(segs, segs.size());
}

bool MatchFrom(const std::vector<std::string>& pat, size_t pi, const std::vector<std::string>& path, size_t si) {
  if (pi == pat.size()) return si == path.size();
  if (pat[pi] == "**") {
    for (size_t k = si; k <= path.size(); ++k) {
      if (MatchFrom(pat, pi + 1, path, k)) return true;
    }
    return false;
  }
  if (si == path.size()) return false;
  if (::fnmatch(pat[pi].c_str(), path[si].c_str(), 0) != 0) return false;
  return MatchFrom(pat, pi + 1, path, si + 1);
}

bool HasGlob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::string GlobEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Adds `rel` and, for a directory (not a symlink to one), everything below.
Status AddTree(const std::string& context, const std::string& rel, const std::vector<std::string>& ignore,
               std::set<std::string>* out) {
  const std::string full = rel.empty() ? context : context + "/" + rel;
  struct stat st {};
  if (::lstat(full.c_str(), &st) != 0) return ErrnoError("lstat " + full);
  if (!rel.empty()) {
    if (Ignored(ignore, rel)) return OkStatus();
    out->insert(rel);
  }
  if (!S_ISDIR(st.st_mode)) return OkStatus();
  const bool negations =
      std::any_of(ignore.begin(), ignore.end(), [](const std::string& p) { return !p.empty() && p[0] == '!'; });
  std::error_code ec;
  fs::recursive_directory_iterator it(full, fs::directory_options::none, ec);
  if (ec) return Status(StatusCode::kUnknown, "open " + full + ": " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return Status(StatusCode::kUnknown, "read " + full + ": " + ec.message());
    // Lexically: a symlink's own path, never its target's.
    std::string child = it->path().lexically_relative(context).generic_string();
    if (Ignored(ignore, child)) {
      // A "!" pattern may take back something below an ignored directory.
      if (!negations && it->is_directory(ec) && !it->is_symlink(ec)) it.disable_recursion_pending();
      continue;
    }
    out->insert(child);
  }
  if (ec) return Status(StatusCode::kUnknown, "read " + full + ": " + ec.message());
  return OkStatus();
}

struct DigestDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

std::vector<std::string> ReadDockerignore(const std::string& context) {
  std::vector<std::string> out;
  std::ifstream f(context + "/.dockerignore");
  std::string line;
  while (std::getline(f, line)) {
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    line = line.substr(b, line.find_last_not_of(" \t\r") - b + 1);
    bool neg = line[0] == '!';
    std::string pat = Clean(neg ? line.substr(1) : line);
    if (pat.empty()) continue;
    out.push_back((neg ? "!" : "") + pat);
  }
  return out;
}

bool Ignored(const std::vector<std::string>& patterns, const std::string& path) {
  const std::vector<std::string> segs = Segments(path);
  bool ignored = false;
  for (const auto& p : patterns) {
    const bool neg = !p.empty() && p[0] == '!';
    const std::vector<std::string> pat = Segments(neg ? p.substr(1) : p);
    if (pat.empty()) continue;
    for (size_t n = 1; n <= segs.size(); ++n) {
      std::vector<std::string> prefix(segs.begin(), segs.begin() + static_cast<long>(n));
      if (MatchFrom(pat, 0, prefix, 0)) {
        ignored = !neg;
        break;
      }
    }
  }
  return ignored;
}

StatusOr<std::vector<std::string>> CopyEntries(const std::string& context, const std::string& src,
                                               const std::vector<std::string>& ignore) {
  const std::string rel = Clean(src);
  std::set<std::string> out;
  if (!HasGlob(rel)) {
    const std::string full = rel.empty() ? context : context + "/" + rel;
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return NotFound("COPY " + src + ": no files found in " + full);
      return ErrnoError("lstat " + full);
    }
    RETURN_IF_ERROR(AddTree(context, rel, ignore, &out));
  } else {
    glob_t g{};
    const std::string pattern = GlobEscape(context) + "/" + rel;
    int rc = ::glob(pattern.c_str(), GLOB_PERIOD, nullptr, &g);
    std::unique_ptr<glob_t, void (*)(glob_t*)> free_glob(&g, ::globfree);
    if (rc == GLOB_NOSPACE) return ResourceExhausted("COPY " + src + ": glob: out of memory");
    if (rc == GLOB_ABORTED) return ErrnoError("COPY " + src + ": glob " + pattern);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) {
      std::string match = g.gl_pathv[i];
      std::string base = fs::path(match).filename().string();
      if (base == "." || base == "..") continue;
      RETURN_IF_ERROR(AddTree(context, match.substr(context.size() + 1), ignore, &out));
    }
  }
  if (out.empty())
    return NotFound("COPY " + src + ": no files found in " + context + "/" + rel +
                    (ignore.empty() ? "" : " (after .dockerignore)"));
  return std::vector<std::string>(out.begin(), out.end());
}

StatusOr<std::string> FilesHash(const std::string& context, const std::string& src, const std::string& dest,
                                const std::vector<std::string>& entries) {
  std::unique_ptr<EVP_MD_CTX, DigestDeleter> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return Internal("sha256: init failed");
  auto update = [&](std::string_view s) { EVP_DigestUpdate(ctx.get(), s.data(), s.size()); };
  update("COPY " + src + " " + dest);
  std::vector<char> buf(1 << 16);
  for (const auto& rel : entries) {
    const std::string full = context + "/" + rel;
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0) return ErrnoError("lstat " + full);
    update(rel);
    update(std::to_string(st.st_mode));
    update(std::to_string(st.st_size));
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      fs::path target = fs::read_symlink(full, ec);
      if (ec) return Status(StatusCode::kUnknown, "readlink " + full + ": " + ec.message());
      update(target.string());
    } else if (S_ISREG(st.st_mode)) {
      std::ifstream f(full, std::ios::binary);
      if (!f) return ErrnoError("open " + full);
      while (f) {
        f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        update(std::string_view(buf.data(), static_cast<size_t>(f.gcount())));
      }
      if (f.bad()) return ErrnoError("read " + full);
    }
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &len) != 1) return Internal("sha256: final failed");
  return HexEncode(md, len);
}

Status WriteArchive(const std::string& context, const std::vector<std::string>& entries, const std::string& out_path) {
  // The names go to tar NUL-separated in a file: any byte in a name is fine,
  // and a name starting with '-' is never an option.
  const std::string list = out_path + ".list";
  {
    std::ofstream f(list, std::ios::binary | std::ios::trunc);
    for (const auto& e : entries) f.write(e.c_str(), static_cast<std::streamsize>(e.size() + 1));
    if (!f) return ErrnoError("write " + list);
  }
  auto r = RunChecked({"tar", "--create", "--gzip", "--file", out_path, "--directory", context, "--no-recursion",
                       "--null", "--verbatim-files-from", "--files-from", list});
  ::unlink(list.c_str());
  if (!r.ok()) return r.status().WithContext("archive the COPY files");
  return OkStatus();
}

}  // namespace airlock::cli
