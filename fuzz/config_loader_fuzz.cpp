// SPDX-License-Identifier: Apache-2.0
// The configuration loader over arbitrary text: whatever the bytes, loading either yields a
// configuration or throws config_error, whose message names a line of the file. Any other
// exception, a crash or a sanitizer report is a bug.
#include "sluice/config/loader.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

namespace {

/// A fixed environment, never the process's, so that a run is repeatable: two variables (one a
/// number, one text full of YAML's special characters) and nothing else.
std::optional<std::string> fuzz_environment(const std::string& name) {
    if (name == "FUZZ_NUMBER") {
        return "5";
    }
    if (name == "FUZZ_TEXT") {
        return "a b#: c${X}$$";
    }
    return std::nullopt;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        const auto cfg = sluice::config::load_string(text, "fuzz.yaml", fuzz_environment);
        // A loaded configuration has what the loader promises.
        if (cfg.upstream.host.empty() || cfg.upstream.port == 0) {
            std::fprintf(stderr, "config_loader_fuzz: loaded without an upstream\n");
            std::abort();
        }
    } catch (const sluice::config::config_error& e) {
        // Every problem is "fuzz.yaml:LINE: ...".
        if (std::string_view(e.what()).rfind("fuzz.yaml:", 0) != 0) {
            std::fprintf(stderr, "config_loader_fuzz: message without a line: %s\n", e.what());
            std::abort();
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "config_loader_fuzz: unexpected exception: %s\n", e.what());
        std::abort();
    }
    return 0;
}
