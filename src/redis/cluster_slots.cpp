// SPDX-License-Identifier: Apache-2.0
#include "sluice/redis/cluster_slots.hpp"

#include "sluice/core/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_set>

namespace sluice::redis {
namespace {

/// The CRC16-XMODEM table, computed once at compile time.
constexpr std::array<std::uint16_t, 256> crc16_table() noexcept {
    std::array<std::uint16_t, 256> table{};
    for (std::uint32_t byte = 0; byte < 256; ++byte) {
        std::uint32_t crc = byte << 8;
        for (int bit = 0; bit < 8; ++bit) {
            crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
        }
        table[byte] = static_cast<std::uint16_t>(crc & 0xffff);
    }
    return table;
}

constexpr auto table = crc16_table();

/// The bytes of a host name (letters, digits, '-', '.', and '_', which some names carry) and of
/// an IP literal (hex digits, ':', and the '.' of an IPv4 address or an embedded one).
constexpr auto node_host_chars = alphanumeric_and("-._:");

/// 1 to 5 decimal digits, nothing else: a slot or a port.
std::optional<std::uint32_t> read_decimal(std::string_view text) noexcept {
    if (text.empty() || text.size() > 5) {
        return std::nullopt;
    }
    std::uint32_t value = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        value = value * 10 + static_cast<std::uint32_t>(c - '0');
    }
    return value;
}

// A node entry [host, port, id?, ...]; nullopt with `error` set when it is not one.
std::optional<cluster_node>
read_node(const reply& r, std::string_view asked_host, bool primary, std::string& error) {
    if (r.type != reply::kind::array || r.elements.size() < 2 ||
        r.elements[1].type != reply::kind::integer) {
        error = "a node is not [host, port, ...]";
        return std::nullopt;
    }
    const auto& host = r.elements[0];
    const auto port = r.elements[1].integer;
    if (port < 1 || port > 65535) {
        error = "a node's port is outside 1..65535";
        return std::nullopt;
    }
    cluster_node node;
    node.port = static_cast<std::uint16_t>(port);
    if (host.type == reply::kind::string) {
        node.host = host.str.empty() ? std::string(asked_host) : host.str;
    } else if (host.type != reply::kind::nil) {
        error = "a node's host is not a string";
        return std::nullopt;
    }
    if (primary && (host.type == reply::kind::nil || node.host == "?")) {
        error = "a primary's address is unknown";
        return std::nullopt;
    }
    if (primary && !is_node_host(node.host)) {
        error = "a primary's host is not a host name or IP address";
        return std::nullopt;
    }
    if (r.elements.size() > 2 && r.elements[2].type == reply::kind::string) {
        node.id = r.elements[2].str;
    }
    return node;
}

/// How many primaries the ranges of `r` name, for the error of a map over the cap: one pass,
/// where looking each up among those found so far is quadratic in them.
std::size_t distinct_primaries(const reply& r) {
    std::unordered_set<std::string> seen;
    for (const auto& range : r.elements) {
        if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) {
            continue;
        }
        const auto& primary = range.elements[2].elements;
        seen.insert(fmt::format("{}:{}", primary[0].str, primary[1].integer));
    }
    return seen.size();
}

} // namespace

bool is_node_host(std::string_view host) noexcept {
    return !host.empty() && host.size() <= max_node_host &&
           std::all_of(host.begin(), host.end(), [](char c) {
               return node_host_chars[static_cast<unsigned char>(c)];
           });
}

std::uint16_t crc16(std::string_view bytes) noexcept {
    std::uint16_t crc = 0;
    for (const char c : bytes) {
        const auto index = static_cast<std::uint8_t>((crc >> 8) ^ static_cast<std::uint8_t>(c));
        crc = static_cast<std::uint16_t>((crc << 8) ^ table[index]);
    }
    return crc;
}

std::string_view hashed_part(std::string_view key) noexcept {
    const auto open = key.find('{');
    if (open == std::string_view::npos) {
        return key;
    }
    const auto close = key.find('}', open + 1);
    if (close == std::string_view::npos || close == open + 1) {
        return key;
    }
    return key.substr(open + 1, close - open - 1);
}

std::uint16_t key_slot(std::string_view key) noexcept {
    return static_cast<std::uint16_t>(crc16(hashed_part(key)) % cluster_slots);
}

std::size_t slot_map::covered() const noexcept {
    return static_cast<std::size_t>(
        std::count_if(owner.begin(), owner.end(), [](std::uint16_t o) { return o != no_owner; }));
}

slot_map_result parse_cluster_slots(const reply& r, std::string_view asked_host) {
    slot_map_result result;
    if (r.type != reply::kind::array) {
        result.error = "the reply is not an array of slot ranges";
        return result;
    }
    slot_map map;
    for (const auto& range : r.elements) {
        if (range.type != reply::kind::array || range.elements.size() < 3 ||
            range.elements[0].type != reply::kind::integer ||
            range.elements[1].type != reply::kind::integer) {
            result.error = "a slot range is not [start, end, primary, ...]";
            return result;
        }
        const auto start = range.elements[0].integer;
        const auto end = range.elements[1].integer;
        if (start < 0 || end >= static_cast<std::int64_t>(cluster_slots) || start > end) {
            result.error = "a slot range is outside 0..16383 or ends before it starts";
            return result;
        }
        auto primary = read_node(range.elements[2], asked_host, true, result.error);
        if (!primary) {
            return result;
        }
        for (std::size_t i = 3; i < range.elements.size(); ++i) {
            if (!read_node(range.elements[i], asked_host, false, result.error)) {
                return result;
            }
        }
        auto found =
            std::find_if(map.primaries.begin(), map.primaries.end(), [&](const cluster_node& n) {
                return n.host == primary->host && n.port == primary->port;
            });
        if (found == map.primaries.end()) {
            if (map.primaries.size() >= max_cluster_primaries) {
                result.error = fmt::format("it names {} primaries, more than the {} a worker "
                                           "connects to",
                                           distinct_primaries(r),
                                           max_cluster_primaries);
                return result;
            }
            map.primaries.push_back(std::move(*primary));
            found = map.primaries.end() - 1;
        }
        const auto index = static_cast<std::uint16_t>(found - map.primaries.begin());
        for (auto slot = start; slot <= end; ++slot) {
            auto& owner = map.owner[static_cast<std::size_t>(slot)];
            if (owner != slot_map::no_owner) {
                result.error = "two ranges share slot " + std::to_string(slot);
                return result;
            }
            owner = index;
        }
    }
    result.map = std::move(map);
    return result;
}

std::optional<redirection> parse_redirection(std::string_view error, std::string_view asked_host) {
    if (error.starts_with("TRYAGAIN")) {
        return redirection{redirection::kind::tryagain, 0, {}, 0};
    }
    redirection out;
    if (error.starts_with("MOVED ")) {
        out.type = redirection::kind::moved;
        error.remove_prefix(6);
    } else if (error.starts_with("ASK ")) {
        out.type = redirection::kind::ask;
        error.remove_prefix(4);
    } else {
        return std::nullopt;
    }
    const auto space = error.find(' ');
    const auto slot =
        space == std::string_view::npos ? std::nullopt : read_decimal(error.substr(0, space));
    if (!slot || *slot >= cluster_slots) {
        return std::nullopt;
    }
    const auto address = error.substr(space + 1);
    const auto colon = address.rfind(':');
    const auto port =
        colon == std::string_view::npos ? std::nullopt : read_decimal(address.substr(colon + 1));
    if (!port || *port == 0 || *port > 65535 || address.find(' ') != std::string_view::npos) {
        return std::nullopt;
    }
    const auto host = colon == 0 ? asked_host : address.substr(0, colon);
    if (!is_node_host(host)) {
        return std::nullopt;
    }
    out.slot = static_cast<std::uint16_t>(*slot);
    out.host = std::string(host);
    out.port = static_cast<std::uint16_t>(*port);
    return out;
}

} // namespace sluice::redis
