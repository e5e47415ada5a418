// SPDX-License-Identifier: Apache-2.0
// Path normalisation (the <endpoint> of every rate-limit key) on arbitrary request-targets.
// Properties, beyond "no crash, no sanitizer report": a normalised path is canonical (starts with
// '/', has no empty, "." or ".." segment, no control byte), and normalising it again changes
// nothing, so that two spellings of one path can never land in two buckets.
#include "sluice/key/path.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

void fail(const char* what, std::string_view path) {
    std::fprintf(
        stderr, "path_fuzz: %s: \"%.*s\"\n", what, static_cast<int>(path.size()), path.data());
    std::abort();
}

void check_canonical(std::string_view path) {
    if (path.empty() || path.front() != '/') {
        fail("does not start with '/'", path);
    }
    if (path.find("//") != std::string_view::npos) {
        fail("has an empty segment", path);
    }
    for (const char c : path) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte <= 0x20 || byte >= 0x7f || c == '?' || c == '#') {
            fail("has a byte that should have been encoded or cut", path);
        }
    }
    // "." and ".." segments (a trailing one included) are gone.
    for (std::size_t start = 1; start <= path.size();) {
        auto end = path.find('/', start);
        if (end == std::string_view::npos) {
            end = path.size();
        }
        const auto segment = path.substr(start, end - start);
        if (segment == "." || segment == "..") {
            fail("has a dot segment", path);
        }
        start = end + 1;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view target(reinterpret_cast<const char*>(data), size);
    const auto path = sluice::key::normalize_path(target);
    if (!path) {
        return 0;
    }
    check_canonical(*path);
    const auto again = sluice::key::normalize_path(*path);
    if (!again || *again != *path) {
        fail("normalising twice changes the path", *path);
    }
    return 0;
}
