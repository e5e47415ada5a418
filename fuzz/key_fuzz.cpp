// SPDX-License-Identifier: Apache-2.0
// Key derivation: rule matching and limit keys over arbitrary methods, targets, patterns and
// header values (as sent, as a Host and as credentials, each in its one spelling). The input is
// lines: a method, a request-target, a header value, then rule path patterns. Properties: the rule
// matched obeys its pattern (exact: equal; prefix: a prefix), the first matching rule wins, a key
// always has the page's prefix and one part per key entry, and it is written in the JSON access log
// as valid UTF-8 with no raw control byte.
#include "sluice/core/text.hpp"
#include "sluice/key/path.hpp"
#include "sluice/key/rate_limit_key.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

void fail(const char* what, std::string_view text) {
    std::fprintf(
        stderr, "key_fuzz: %s: \"%.*s\"\n", what, static_cast<int>(text.size()), text.data());
    std::abort();
}

std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> lines;
    std::size_t start = 0;
    while (start <= text.size() && lines.size() < 16) {
        auto end = text.find('\n', start);
        if (end == std::string_view::npos) {
            end = text.size();
        }
        lines.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    return lines;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace sluice;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto lines = split_lines(text);
    if (lines.size() < 3) {
        return 0;
    }
    const auto method = lines[0];
    const auto path = key::normalize_path(lines[1]);
    const auto header_value = lines[2];
    if (!path) {
        return 0;
    }

    std::vector<config::rule> rules;
    for (std::size_t i = 3; i < lines.size(); ++i) {
        config::rule r;
        r.path = std::string(lines[i]);
        r.kind = key::classify_pattern(r.path);
        if (i % 2 == 0) {
            r.methods.emplace_back(method);
        }
        rules.push_back(std::move(r));
    }
    const auto* matched = key::match_rule(rules, method, *path);
    if (matched != nullptr) {
        if (matched->kind == config::rule::match_kind::exact && matched->path != *path) {
            fail("an exact rule matched another path", text);
        }
        if (matched->kind == config::rule::match_kind::prefix &&
            !path->starts_with(
                std::string_view(matched->path).substr(0, matched->path.size() - 1))) {
            fail("a prefix rule matched a path without its prefix", text);
        }
        // No earlier rule matches: the first one wins.
        for (const auto& r : rules) {
            if (&r == matched) {
                break;
            }
            if (key::match_rule(std::span(&r, 1), method, *path) != nullptr) {
                fail("a later rule won over an earlier match", text);
            }
        }
    }

    config::limit limit;
    limit.key = {{config::key_part::kind::ip, {}, {}},
                 {config::key_part::kind::endpoint, {}, {}},
                 {config::key_part::kind::header, "x-tenant", {}},
                 {config::key_part::kind::header, "Host", {}},
                 {config::key_part::kind::header, "authorization", {}},
                 {config::key_part::kind::global, {}, {}}};
    auto headers = [&](std::string_view) -> std::optional<std::string_view> {
        return header_value;
    };
    const auto k = key::limit_key(limit, "203.0.113.7", *path, headers);
    if (!k.starts_with("rate-limit:203.0.113.7:")) {
        fail("a key without the page's prefix", k);
    }
    if (!k.ends_with(":*")) {
        fail("a key whose global part is not last", k);
    }
    // The key as the JSON access log writes it: valid UTF-8, no control byte left raw.
    std::string escaped;
    append_json_escaped(escaped, k);
    if (!is_utf8(escaped) || std::any_of(escaped.begin(), escaped.end(), [](char c) {
            return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        })) {
        fail("a JSON-escaped key that is no valid JSON string text", escaped);
    }
    return 0;
}
