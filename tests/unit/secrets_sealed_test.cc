// Sealing (src/secrets/sealed.h): AES-256-GCM under a 32-byte key with the
// additional data binding a value to its name, the key file rules the
// secret store and the cluster key share, and base64.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "secrets/sealed.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::secrets {
namespace {

using test_util::MakeTempDir;
using test_util::ScopedDir;

void WriteFile(const std::string& path, const std::string& data, mode_t mode) {
  std::ofstream(path, std::ios::binary) << data;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0);
}

constexpr char kInfo[] = R"({"policy":{"scope":"brokered","hosts":["api.x.com"]},"updatedAtMs":1})";

TEST(Sealed, RoundTripsAndRefusesAnotherKeyNameInfoOrByte) {
  const std::string key = *NewSealKey(), other = *NewSealKey();
  ASSERT_EQ(key.size(), 32u);
  EXPECT_NE(key, other);
  const std::string value = "sealed-canary-value";
  auto sealed = Seal(key, ClusterSecretAad("TOKEN", kInfo), value);
  ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
  EXPECT_EQ(sealed->size(), 12 + value.size() + 16);
  EXPECT_EQ(sealed->find(value), std::string::npos);
  EXPECT_NE(*Seal(key, ClusterSecretAad("TOKEN", kInfo), value), *sealed);  // a fresh nonce each time
  EXPECT_EQ(*Unseal(key, ClusterSecretAad("TOKEN", kInfo), *sealed), value);
  EXPECT_EQ(ClusterSecretAad("TOKEN", kInfo), std::string("airlock-cluster-secret-v2:TOKEN\n") + kInfo);
  // Another policy (the info the registry holds beside it) does not open it.
  EXPECT_EQ(Unseal(key, ClusterSecretAad("TOKEN", R"({"policy":{"scope":"env","teams":["a"]}})"), *sealed).status().code(),
            StatusCode::kDataLoss);

  EXPECT_EQ(Unseal(other, ClusterSecretAad("TOKEN", kInfo), *sealed).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(Unseal(key, ClusterSecretAad("OTHER", kInfo), *sealed).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(Unseal(key, "airlock-secret-v1:TOKEN", *sealed).status().code(), StatusCode::kDataLoss);
  for (size_t i : {size_t{0}, size_t{12}, sealed->size() - 1}) {
    std::string bad = *sealed;
    bad[i] ^= 1;
    EXPECT_EQ(Unseal(key, ClusterSecretAad("TOKEN", kInfo), bad).status().code(), StatusCode::kDataLoss) << i;
  }
  EXPECT_EQ(Unseal(key, ClusterSecretAad("TOKEN", kInfo), sealed->substr(0, 27)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(Unseal(key, ClusterSecretAad("TOKEN", kInfo), "").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(Seal("short", "", value).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Unseal("short", "", *sealed).status().code(), StatusCode::kInvalidArgument);
  // The empty value seals too (nonce and tag only).
  auto empty = Seal(key, "", "");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 28u);
  EXPECT_EQ(*Unseal(key, "", *empty), "");
}

TEST(Sealed, KeyFilesAreMadeOnceAndCheckedByTheirRules) {
  ScopedDir d{MakeTempDir("sealed")};
  const std::string path = d.path + "/secrets.key";
  auto made = CreateKeyFile(path);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(*made);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  auto key = LoadKeyFile(path);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->size(), 32u);
  // Kept when it exists.
  EXPECT_FALSE(*CreateKeyFile(path));
  EXPECT_EQ(*LoadKeyFile(path), *key);
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.path)) {
    EXPECT_EQ(e.path().filename(), "secrets.key");
    ++files;
  }
  EXPECT_EQ(files, 1);

  // Each rule, named with the path.
  auto refused = [&](StatusCode code, const std::string& words) {
    auto got = LoadKeyFile(path);
    EXPECT_EQ(got.status().code(), code) << got.status().ToString();
    EXPECT_NE(got.status().message().find(path), std::string::npos) << got.status().ToString();
    EXPECT_NE(got.status().message().find(words), std::string::npos) << got.status().ToString();
  };
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  refused(StatusCode::kPermissionDenied, "readable by group or others (mode 0640)");
  ASSERT_EQ(::chmod(path.c_str(), 0604), 0);
  refused(StatusCode::kPermissionDenied, "readable by group or others");
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  WriteFile(path, std::string(31, 'k'), 0600);
  refused(StatusCode::kDataLoss, "exactly 32 bytes (it holds 31)");
  WriteFile(path, std::string(33, 'k'), 0600);
  refused(StatusCode::kDataLoss, "exactly 32 bytes");
  WriteFile(path, std::string(32, 'k'), 0600);
  EXPECT_EQ(*LoadKeyFile(path), std::string(32, 'k'));
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    refused(StatusCode::kPermissionDenied, "is owned by uid 65534, not this user");
  }
  EXPECT_EQ(LoadKeyFile(d.path + "/missing").status().code(), StatusCode::kNotFound);
  EXPECT_NE(LoadKeyFile(d.path + "/missing").status().message().find(d.path + "/missing"), std::string::npos);
  ASSERT_EQ(::mkdir((d.path + "/dir").c_str(), 0700), 0);
  EXPECT_EQ(LoadKeyFile(d.path + "/dir").status().code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(::symlink(path.c_str(), (d.path + "/link").c_str()), 0);
  EXPECT_FALSE(LoadKeyFile(d.path + "/link").ok());  // never through a symbolic link
  // A directory that cannot be written: an error naming the temporary file.
  EXPECT_FALSE(CreateKeyFile(d.path + "/no/such/dir/secrets.key").ok());
}

TEST(Sealed, Base64RoundTripsAndRefusesWhatIsNotBase64) {
  for (std::string bytes : {std::string(), std::string("a"), std::string("ab"), std::string("abc"),
                            std::string("\0\xff\x10\x80", 4), std::string(1000, '\xfe')}) {
    const std::string text = EncodeBase64(bytes);
    EXPECT_EQ(text.size() % 4, 0u);
    auto back = DecodeBase64(text);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, bytes);
  }
  EXPECT_EQ(EncodeBase64("ab"), "YWI=");
  EXPECT_EQ(*DecodeBase64("YWI="), "ab");
  EXPECT_EQ(*DecodeBase64("YQ=="), "a");
  for (const char* bad : {"YWI", "YW I", "YWI=YWI=", "Y===", "YW-_", "\xff\xff\xff\xff"}) {
    EXPECT_EQ(DecodeBase64(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  std::string wipe = "a-secret-value";
  Wipe(wipe);
  EXPECT_TRUE(wipe.empty());
}

}  // namespace
}  // namespace airlock::secrets
