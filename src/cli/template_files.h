// The files of a COPY step on the client side of a template build
// (shared/spec/e2b-templates.md §A.4), for `airlock template build`:
//
//   CopyEntries   what `src` takes from the context directory: the paths
//                 its glob matches (dot files too), each matched directory
//                 with everything below it, minus what .dockerignore
//                 excludes; relative POSIX paths, sorted, no "." entry
//   FilesHash     the step's files hash, the SDK's calculateFilesHash:
//                 sha256 hex of "COPY <src> <dest>" then, per entry, its
//                 path, decimal st_mode and st_size, and its bytes (a
//                 regular file) or link target (a symlink). uid, gid and
//                 mtime are left out, so a fresh checkout hashes the same.
//                 The server keys its upload cache by it and never
//                 recomputes it.
//   WriteArchive  a gzipped tar of exactly those entries (no recursion:
//                 ignored files stay out), made by the `tar` program;
//                 symlinks stay symlinks; the server extracts it in the
//                 build sandbox
//
// Errors: NotFound "COPY <src>: no files found in <path>", InvalidArgument
// for a bad pattern, the failing syscall and path otherwise; WriteArchive
// carries tar's stderr.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace airlock::cli {

// The patterns of <context>/.dockerignore (none when it is absent): blank
// lines and # comments dropped, each cleaned (leading "/" and "./" gone).
// A leading "!" re-includes.
std::vector<std::string> ReadDockerignore(const std::string& context);

// Docker's rule: the last pattern that matches `path` or one of its parent
// directories decides (a "!" pattern re-includes). Patterns are
// filepath.Match globs per path segment, plus "**" for any number of
// segments.
bool Ignored(const std::vector<std::string>& patterns, const std::string& path);

StatusOr<std::vector<std::string>> CopyEntries(const std::string& context, const std::string& src,
                                               const std::vector<std::string>& ignore);

StatusOr<std::string> FilesHash(const std::string& context, const std::string& src, const std::string& dest,
                                const std::vector<std::string>& entries);

Status WriteArchive(const std::string& context, const std::vector<std::string>& entries, const std::string& out_path);

}  // namespace airlock::cli
