// SPDX-License-Identifier: Apache-2.0
#pragma once

// Helpers for tests about which limit decided a request: a YAML config built around a
// `rate-limit:` block, one request reduced to what its RateLimit headers and 429 body say, and
// readers for the flat JSON of sluice's 429 body. Header-only: every function is inline.

#include "support/admin_client.hpp"
#include "support/http_client.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::test {

/**
 * A complete config forwarding to `upstream_url`: `server_extra` lines go under `server:`,
 * `rate_limit` under `rate-limit:` and `logging` under `logging:` (each indented by two spaces
 * already). The admin listener takes any free port on loopback.
 */
inline std::string compose_yaml(const std::string& upstream_url,
                                const std::string& rate_limit,
                                const std::string& server_extra = "",
                                const std::string& logging = "  level: info\n") {
    return "server:\n  listen: \"127.0.0.1:0\"\n" + server_extra + "upstream:\n  url: \"" +
           upstream_url + "\"\nrate-limit:\n" + rate_limit + "logging:\n" + logging +
           admin_any_port_yaml;
}

/**
 * The lines of a `rate-limit:` block whose fallback refuses nothing a test sends: a police
 * LEAKY_BUCKET of `capacity` (a recognisable quota in the RateLimit headers) that refills
 * 100,000 a second.
 */
inline std::string roomy_fallback_yaml(long long capacity = 1'000'000) {
    return fmt::format("  fallback: {{ capacity: {}, flowRate: 100000, mode: police }}\n",
                       capacity);
}

/**
 * The `store: redis` lines of a `rate-limit:` block for a server on 127.0.0.1:`port`. It fails
 * closed, so that a Redis error shows as a 503 rather than as an admitted request.
 */
inline std::string redis_store_yaml(std::uint16_t port) {
    return fmt::format("  store: redis\n"
                       "  redis:\n"
                       "    host: 127.0.0.1\n"
                       "    port: {}\n"
                       "    ttl: 2h\n"
                       "    timeout: 500ms\n"
                       "    failure-mode: closed\n",
                       port);
}

/// What a response says about the limit that decided it.
struct limit_view {
    unsigned status = 0;
    /// RateLimit-Policy's name: the rule's, or "fallback"; empty without the header.
    std::string policy;
    std::optional<long long> quota;
    std::optional<long long> remaining;
    std::string body;
    std::optional<std::string> retry_after;
};

inline limit_view view_of(const http_response& response) {
    limit_view v;
    v.status = response.status;
    v.body = response.body;
    v.retry_after = response.header("Retry-After");
    const auto policy = response.header("RateLimit-Policy");
    if (const auto item = policy ? parse_sf_item(*policy) : std::nullopt) {
        v.policy = item->name;
        v.quota = item->integer("q");
    }
    if (const auto header = response.header("RateLimit")) {
        if (const auto item = parse_sf_item(*header)) {
            v.remaining = item->integer("r");
        }
    }
    return v;
}

/// One request on a fresh connection, reduced to its `limit_view`.
inline limit_view probe(std::uint16_t port,
                        const std::string& method,
                        const std::string& target,
                        const header_list& headers = {}) {
    return view_of(request(port, method, target, headers));
}

/// The value of `"field":"..."` in a flat JSON object (no escapes in it); "<missing>" if absent.
inline std::string json_string_field(const std::string& body, const std::string& field) {
    const std::string open = "\"" + field + "\":\"";
    const auto at = body.find(open);
    if (at == std::string::npos) {
        return "<missing>";
    }
    const auto begin = at + open.size();
    return body.substr(begin, body.find('"', begin) - begin);
}

/// The integer of `"field":N` in a flat JSON object; nullopt if absent or not a number.
inline std::optional<long long> json_int_field(const std::string& body, const std::string& field) {
    const std::string open = "\"" + field + "\":";
    const auto at = body.find(open);
    if (at == std::string::npos) {
        return std::nullopt;
    }
    try {
        return std::stoll(body.substr(at + open.size()));
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

/// How a burst went: 200s, 429s, anything else, and every response in send order.
struct burst_counts {
    int admitted = 0;
    int rejected = 0;
    int other = 0;
    std::vector<http_response> responses;
};

/// `count` GETs of `target`, each on its own connection opened up front, all sent before any
/// response is read: one burst, decided as fast as sluice can.
inline burst_counts burst_get(std::uint16_t port, int count, const std::string& target) {
    std::vector<std::unique_ptr<http_connection>> connections;
    for (int i = 0; i < count; ++i) {
        connections.push_back(std::make_unique<http_connection>(port));
    }
    for (auto& connection : connections) {
        connection->send("GET", target);
    }
    burst_counts result;
    for (auto& connection : connections) {
        http_response response = connection->read_response();
        (response.status == 200   ? result.admitted
         : response.status == 429 ? result.rejected
                                  : result.other)++;
        result.responses.push_back(std::move(response));
    }
    return result;
}

/// Field/value pairs as a map, so that two snapshots compare whatever their order.
inline std::map<std::string, std::string>
as_map(const std::vector<std::pair<std::string, std::string>>& pairs) {
    return {pairs.begin(), pairs.end()};
}

/// "{ a=1 b=2 }", for assertion messages.
inline std::string describe(const std::map<std::string, std::string>& fields) {
    std::string text = "{";
    for (const auto& [name, value] : fields) {
        text += " " + name + "=" + value;
    }
    return text + " }";
}

} // namespace sluice::test
