// SPDX-License-Identifier: Apache-2.0
#include "sluice/key/client_address.hpp"

#include "cidr_detail.hpp"

#include <algorithm>
#include <cstddef>

namespace sluice::key {

bool is_trusted_proxy(const ip_address& address, std::span<const cidr> trusted) noexcept {
    for (const cidr& block : trusted) {
        if (block.contains(address)) {
            return true;
        }
    }
    return false;
}

namespace {

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
        s.remove_suffix(1);
    }
    return s;
}

// A port after an address: 1 to 5 decimal digits, at most 65535.
bool is_port(std::string_view s) noexcept {
    if (s.empty() || s.size() > 5) {
        return false;
    }
    unsigned value = 0;
    for (char c : s) {
        if (c < '0' || c > '9') {
            return false;
        }
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    return value <= 65535;
}

} // namespace

std::optional<ip_address> parse_forwarded_entry(std::string_view entry) noexcept {
    entry = trim(entry);
    if (!entry.empty() && entry.front() == '[') {
        // "[v6]" or "[v6]:port"; brackets around IPv4 are not a form anyone writes.
        const std::size_t close = entry.find(']');
        if (close == std::string_view::npos) {
            return std::nullopt;
        }
        const std::string_view after = entry.substr(close + 1);
        if (!after.empty() && (after.front() != ':' || !is_port(after.substr(1)))) {
            return std::nullopt;
        }
        const std::string_view inner = entry.substr(1, close - 1);
        if (inner.find(':') == std::string_view::npos) {
            return std::nullopt;
        }
        return ip_address::parse(inner);
    }
    // Exactly one ':' can only be IPv4 with a port; IPv6 without brackets has at least two.
    const std::size_t colon = entry.find(':');
    if (colon != std::string_view::npos && entry.find(':', colon + 1) == std::string_view::npos) {
        if (!is_port(entry.substr(colon + 1))) {
            return std::nullopt;
        }
        ip_address a;
        if (!detail::parse_v4(entry.substr(0, colon), a.bytes.data())) {
            return std::nullopt;
        }
        return a;
    }
    return ip_address::parse(entry);
}

ip_address client_address(const ip_address& peer,
                          std::string_view x_forwarded_for,
                          std::span<const cidr> trusted) noexcept {
    if (!is_trusted_proxy(peer, trusted)) {
        return peer;
    }
    ip_address last_trusted = peer;
    std::string_view rest = x_forwarded_for;
    while (!rest.empty()) {
        // Take the right-most entry off the list.
        const std::size_t comma = rest.rfind(',');
        const std::string_view entry =
            comma == std::string_view::npos ? rest : rest.substr(comma + 1);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(0, comma);
        if (trim(entry).empty()) {
            continue;
        }
        const std::optional<ip_address> hop = parse_forwarded_entry(entry);
        if (!hop) {
            return last_trusted;
        }
        if (!is_trusted_proxy(*hop, trusted)) {
            return *hop;
        }
        last_trusted = *hop;
    }
    return last_trusted;
}

std::string client_key_part(const ip_address& address, int ipv6_prefix, std::string_view text) {
    if (address.v4) {
        return text.empty() ? address.to_string() : std::string(text);
    }
    // Behind a NAT64 that translates IPv4 clients into 64:ff9b::/96 (SIIT-DC, RFC 7755), every
    // IPv4 client of the internet would share that /64's one bucket: one could spend the limit
    // of all. Each is keyed by the IPv4 address it carries, as it would be reaching sluice
    // directly.
    if (detail::is_nat64_well_known(address.bytes)) {
        ip_address v4;
        v4.v4 = true;
        std::copy(address.bytes.begin() + 12, address.bytes.end(), v4.bytes.begin());
        return v4.to_string();
    }
    if (ipv6_prefix >= 128) {
        return text.empty() ? address.to_string() : std::string(text);
    }
    const int prefix = ipv6_prefix < 0 ? 0 : ipv6_prefix;
    ip_address network = address;
    detail::mask(network, prefix);
    std::string out = network.to_string();
    out.push_back('/');
    out.append(std::to_string(prefix));
    return out;
}

} // namespace sluice::key
