// SPDX-License-Identifier: Apache-2.0
#pragma once

// Small process-level helpers for tests: a self-deleting temporary directory and a free port.

#include <cstdint>
#include <filesystem>
#include <string>

namespace sluice::test {

/**
 * A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
 * Throws std::runtime_error if it cannot be created.
 */
class temp_dir {
public:
    temp_dir();
    ~temp_dir();
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;

    const std::filesystem::path& path() const { return path_; }

    /// `path() / name` as a string.
    std::string file(const std::string& name) const;

    /// Writes `text` to `path() / name` and returns the full path.
    std::string write_file(const std::string& name, const std::string& text) const;

private:
    std::filesystem::path path_;
};

/**
 * A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed). Nothing
 * listens on it afterwards, which is what "upstream down" tests want.
 */
std::uint16_t free_port();

/// The whole content of a file, or "" if it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

} // namespace sluice::test
