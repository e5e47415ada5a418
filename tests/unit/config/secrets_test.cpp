// SPDX-License-Identifier: Apache-2.0
// The Redis password: read from a file (rate-limit.redis.password-file), and never quoted in a
// problem message, whatever is wrong around it.
#include "config_test_util.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::config::test {
namespace {

const std::string secret = "hunter2-S3CRET";

/// A file in a fresh directory, removed with it at the end of the test.
class secret_file {
public:
    secret_file() {
        std::string pattern = (std::filesystem::temp_directory_path() / "sluice-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        dir_ = pattern;
    }

    ~secret_file() {
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
    }

    secret_file(const secret_file&) = delete;
    secret_file& operator=(const secret_file&) = delete;

    std::string write(const std::string& content) const {
        std::ofstream(path(), std::ios::binary) << content;
        return path();
    }

    std::string path() const { return (dir_ / "password").string(); }

    std::string dir() const { return dir_.string(); }

private:
    std::filesystem::path dir_;
};

std::string with_password_file(const std::string& path) {
    return base + "rate-limit:\n  store: redis\n  redis:\n    password-file: " + path + "\n";
}

TEST(ConfigSecrets, PasswordFileStripsOneTrailingNewline) {
    secret_file file;
    EXPECT_EQ(load(with_password_file(file.write(secret + "\n"))).rate_limit.redis.password,
              secret);
    EXPECT_EQ(load(with_password_file(file.write(secret + "\r\n"))).rate_limit.redis.password,
              secret);
    EXPECT_EQ(load(with_password_file(file.write(secret))).rate_limit.redis.password, secret);
    EXPECT_EQ(load(with_password_file(file.write(secret + "\n\n"))).rate_limit.redis.password,
              secret + "\n");
    EXPECT_EQ(load(with_password_file(file.write("a b#: c\n"))).rate_limit.redis.password,
              "a b#: c");
}

TEST(ConfigSecrets, PasswordFileIsReadAgainOnEveryLoad) {
    secret_file file;
    const auto yaml = with_password_file(file.write("first\n"));
    EXPECT_EQ(load(yaml).rate_limit.redis.password, "first");
    file.write("second\n");
    EXPECT_EQ(load(yaml).rate_limit.redis.password, "second");
}

TEST(ConfigSecrets, UnreadablePasswordFileNamesKeyLineAndOsError) {
    secret_file file;
    auto p = problems_of(with_password_file(file.path()));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.password-file", "No such file or directory"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.password-file", file.path()));
    p = problems_of(with_password_file(file.dir()));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.password-file", "is not a regular file"));
    // A FIFO would block the loader until someone writes to it.
    const auto fifo = file.dir() + "/fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    p = problems_of(with_password_file(fifo));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.password-file", "is not a regular file"));
    p = problems_of(with_password_file(file.write("\n")));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.password-file", "is empty"));
    p = problems_of(with_password_file(file.write(std::string(70'000, 'x'))));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.password-file", "is larger than 65536"));
}

TEST(ConfigSecrets, PasswordAndPasswordFileTogetherAreAnError) {
    secret_file file;
    const auto p = problems_of(with_password_file(file.write(secret)) + "    password: x\n");
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.password-file", "'password' are both set"));
}

TEST(ConfigSecrets, NoProblemMessageQuotesThePassword) {
    secret_file file;
    file.write(secret + "\n");
    // Each config is wrong at or around the password; none of the messages may hold it.
    const std::vector<std::string> configs{
        base + "rate-limit:\n  redis:\n    password: " + secret + "${\n",
        base + "rate-limit:\n  redis:\n    password: " + secret + "${1X}\n",
        base + "rate-limit:\n  redis:\n    password: " + secret + "${UNSET_FOR_TEST_1}\n",
        base + "rate-limit:\n  redis:\n    password: " + secret + "\xff" + "\n",
        base + "rate-limit:\n  redis:\n    password: \"" + secret + "\\0\"\n",
        base + "rate-limit:\n  redis:\n    password: [" + secret + "]\n",
        base + "rate-limit:\n  redis:\n    password: {" + secret + ": 1}\n",
        base + "rate-limit:\n  redis:\n    pasword: " + secret + "\n",
        base + "rate-limit:\n  redis:\n    password: " + secret + "\n    password: " + secret +
            "\n",
        base + "rate-limit:\n  redis:\n    password: " + secret +
            "\n    password-file: " + file.path() + "\n",
        base + "rate-limit:\n  redis:\n    password-file: " + file.path() + "\n    port: x\n",
        base + "rate-limit:\n  redis:\n    password: \"" + secret + "\n",
    };
    for (const auto& yaml : configs) {
        const auto p = problems_of(yaml);
        ASSERT_FALSE(p.empty()) << yaml;
        for (const auto& line : p) {
            EXPECT_EQ(line.find("S3CRET"), std::string::npos) << line;
        }
    }
}

} // namespace
} // namespace sluice::config::test
