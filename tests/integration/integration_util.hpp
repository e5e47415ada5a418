// SPDX-License-Identifier: Apache-2.0
#pragma once

// Small helpers shared by the integration tests: config presets and a parser for the
// structured-field headers RateLimit and RateLimit-Policy.

#include "support/http_client.hpp"
#include "support/recording_upstream.hpp"
#include "support/sluice_process.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::test {

/// The page's key for a client on 127.0.0.1 and a path: rate-limit:<ip>:<endpoint>.
inline std::string page_key(const std::string& path) {
    return "rate-limit:127.0.0.1:" + path;
}

/// "PATH:LINE" of the first line of `yaml` (a config written to PATH) that holds `text`: where a
/// message about the key on that line points.
inline std::string where_in(const std::string& path, std::string_view yaml, std::string_view text) {
    const auto at = yaml.find(text);
    const auto line =
        1 + std::count(yaml.begin(),
                       yaml.begin() + static_cast<std::ptrdiff_t>(std::min(at, yaml.size())),
                       '\n');
    return path + ":" + std::to_string(line);
}

/// A config that forwards to `upstream` and, with the defaults, never limits.
inline sluice_config config_for(const recording_upstream& upstream) {
    sluice_config config;
    config.upstream_url = upstream.url();
    return config;
}

/// One item of an RFC 8941 list: `"name";q=50;w=10` (only what the RateLimit headers use).
struct sf_item {
    std::string name;
    std::map<std::string, std::string> params;

    std::optional<long long> integer(const std::string& key) const {
        const auto it = params.find(key);
        if (it == params.end() || it->second.empty()) {
            return std::nullopt;
        }
        try {
            std::size_t used = 0;
            const long long value = std::stoll(it->second, &used);
            if (used != it->second.size()) {
                return std::nullopt;
            }
            return value;
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }
};

inline std::string_view trim(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
        text.remove_prefix(1);
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
        text.remove_suffix(1);
    }
    return text;
}

/// Parses the first item of a structured-field list; nullopt if it is not shaped like one.
inline std::optional<sf_item> parse_sf_item(std::string_view text) {
    text = trim(text);
    sf_item item;
    if (!text.empty() && text.front() == '"') {
        const auto close = text.find('"', 1);
        if (close == std::string_view::npos) {
            return std::nullopt;
        }
        item.name = std::string(text.substr(1, close - 1));
        text.remove_prefix(close + 1);
    } else {
        const auto end = text.find_first_of(";,");
        item.name = std::string(trim(text.substr(0, end)));
        text.remove_prefix(end == std::string_view::npos ? text.size() : end);
    }
    text = text.substr(0, text.find(','));
    while (!text.empty() && text.front() == ';') {
        text.remove_prefix(1);
        const auto end = text.find(';');
        const std::string_view param = trim(text.substr(0, end));
        text.remove_prefix(end == std::string_view::npos ? text.size() : end);
        const auto equals = param.find('=');
        if (param.empty() || equals == 0) {
            return std::nullopt;
        }
        item.params[std::string(param.substr(0, equals))] =
            equals == std::string_view::npos ? "?1" : std::string(param.substr(equals + 1));
    }
    if (!trim(text).empty()) {
        return std::nullopt;
    }
    return item;
}

/// The `r` (remaining) parameter of a response's RateLimit header.
inline std::optional<long long> remaining_of(const http_response& response) {
    const auto header = response.header("RateLimit");
    if (!header) {
        return std::nullopt;
    }
    const auto item = parse_sf_item(*header);
    return item ? item->integer("r") : std::nullopt;
}

} // namespace sluice::test
