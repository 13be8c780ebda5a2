// Replays a fuzz target's seed corpus as an ordinary test (no libFuzzer
// needed): `fuzz_seeds NAME DIR...` runs target NAME (seed_targets.h) on
// every file of the directories given. A crash or sanitizer report fails
// the test; an unknown NAME or no input at all fails it too.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "seed_targets.h"

int main(int argc, char** argv) {
  using airlock::fuzz::kSeedTargets;
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_seeds NAME DIR...\n");
    return 2;
  }
  const airlock::fuzz::SeedTarget* target = nullptr;
  for (const auto* t = kSeedTargets; t->name; ++t) {
    if (std::strcmp(t->name, argv[1]) == 0) {
      target = t;
      break;
    }
  }
  if (!target) {
    std::fprintf(stderr, "fuzz_seeds: no target named %s\n", argv[1]);
    return 2;
  }
  size_t n = 0;
  for (int i = 2; i < argc; ++i) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i])) {
      if (!e.is_regular_file()) continue;
      std::ifstream f(e.path(), std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  std::printf("%s: replayed %zu seed inputs\n", target->name, n);
  return n > 0 ? 0 : 1;
}
