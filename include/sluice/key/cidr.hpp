// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::key {

/// An IPv4 or IPv6 address. IPv4-mapped IPv6 (::ffff:a.b.c.d) is stored as IPv4.
struct ip_address {
    std::array<std::uint8_t, 16> bytes{}; // IPv4 uses the first 4
    bool v4 = true;

    /// Parses dotted-quad IPv4 or RFC 4291 IPv6 text (no brackets, no zone). nullopt if invalid.
    static std::optional<ip_address> parse(std::string_view text) noexcept;

    /// Canonical text: dotted quad, or RFC 5952 IPv6.
    std::string to_string() const;

    friend bool operator==(const ip_address&, const ip_address&) = default;
};

/// An address block such as 10.0.0.0/8 or 2001:db8::/32. A bare address is a /32 or /128.
struct cidr {
    ip_address network;
    int prefix = 32;

    static std::optional<cidr> parse(std::string_view text) noexcept;

    bool contains(const ip_address& address) const noexcept;

    std::string to_string() const;

    friend bool operator==(const cidr&, const cidr&) = default;
};

} // namespace sluice::key
