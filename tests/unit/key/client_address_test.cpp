// SPDX-License-Identifier: Apache-2.0
#include "sluice/key/client_address.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::key {
namespace {

ip_address ip(std::string_view text) {
    const std::optional<ip_address> a = ip_address::parse(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a.value_or(ip_address{});
}

std::vector<cidr> blocks(std::initializer_list<std::string_view> texts) {
    std::vector<cidr> out;
    for (std::string_view t : texts) {
        const std::optional<cidr> c = cidr::parse(t);
        EXPECT_TRUE(c.has_value()) << t;
        out.push_back(c.value_or(cidr{}));
    }
    return out;
}

struct xff_case {
    std::string_view name;
    std::string_view peer;
    std::string_view xff;
    std::string_view client;
};

// Trusted: 10.0.0.0/8 (the load balancers) and 2001:db8:ffff::/48 (IPv6 proxies).
const xff_case xff_cases[] = {
    {"untrusted peer ignores XFF", "198.51.100.9", "203.0.113.7", "198.51.100.9"},
    {"untrusted peer, spoofed chain", "198.51.100.9", "10.0.0.1, 1.1.1.1", "198.51.100.9"},
    {"trusted peer, no XFF", "10.0.0.1", "", "10.0.0.1"},
    {"trusted peer, one hop", "10.0.0.1", "203.0.113.7", "203.0.113.7"},
    {"client-supplied prefix is ignored", "10.0.0.1", "1.1.1.1, 203.0.113.7", "203.0.113.7"},
    {"trusted hops skipped", "10.0.0.1", "1.1.1.1, 203.0.113.7, 10.2.3.4, 10.0.0.9", "203.0.113.7"},
    {"all trusted: left-most", "10.0.0.1", "10.9.9.9, 10.2.3.4", "10.9.9.9"},
    {"whitespace and tabs", "10.0.0.1", "  1.1.1.1 ,\t203.0.113.7\t, 10.2.3.4 ", "203.0.113.7"},
    {"empty elements ignored", "10.0.0.1", ",203.0.113.7,, ,", "203.0.113.7"},
    {"joined header lines", "10.0.0.1", "203.0.113.7, 10.2.3.4, 10.3.3.3", "203.0.113.7"},
    {"garbage right of client: last trusted",
     "10.0.0.1",
     "203.0.113.7, unknown, 10.2.3.4",
     "10.2.3.4"},
    {"garbage first: peer", "10.0.0.1", "203.0.113.7, unknown", "10.0.0.1"},
    {"garbage left of client is never reached", "10.0.0.1", "unknown, 203.0.113.7", "203.0.113.7"},
    {"obfuscated name", "10.0.0.1", "_hidden", "10.0.0.1"},
    {"leading-zero IPv4 is garbage", "10.0.0.1", "010.0.0.1", "10.0.0.1"},
    {"IPv4 with port", "10.0.0.1", "203.0.113.7:4711", "203.0.113.7"},
    {"trusted IPv4 with port", "10.0.0.1", "203.0.113.7, 10.2.3.4:80", "203.0.113.7"},
    {"bad port", "10.0.0.1", "203.0.113.7:99999", "10.0.0.1"},
    {"empty port", "10.0.0.1", "203.0.113.7:", "10.0.0.1"},
    {"bare IPv6", "10.0.0.1", "2001:db8::7", "2001:db8::7"},
    {"bracketed IPv6", "10.0.0.1", "[2001:db8::7]", "2001:db8::7"},
    {"bracketed IPv6 with port", "10.0.0.1", "[2001:db8::7]:443", "2001:db8::7"},
    {"loopback with port", "10.0.0.1", "[::1]:80", "::1"},
    {"bracket not closed", "10.0.0.1", "[2001:db8::7", "10.0.0.1"},
    {"junk after bracket", "10.0.0.1", "[2001:db8::7]x", "10.0.0.1"},
    {"bracketed IPv4", "10.0.0.1", "[203.0.113.7]", "10.0.0.1"},
    {"IPv6 zone", "10.0.0.1", "fe80::1%eth0", "10.0.0.1"},
    {"mapped entry is IPv4", "10.0.0.1", "::ffff:203.0.113.7", "203.0.113.7"},
    {"mapped trusted entry skipped", "10.0.0.1", "203.0.113.7, ::ffff:10.2.3.4", "203.0.113.7"},
    {"mapped trusted peer", "::ffff:10.0.0.1", "203.0.113.7", "203.0.113.7"},
    {"IPv6 trusted peer", "2001:db8:ffff::1", "203.0.113.7", "203.0.113.7"},
    {"IPv6 trusted hop", "10.0.0.1", "2001:db8::7, [2001:db8:ffff::2]:8080", "2001:db8::7"},
    {"IPv6 untrusted peer", "2001:db8::1", "203.0.113.7", "2001:db8::1"},
};

TEST(ClientAddress, ForwardedForTable) {
    const std::vector<cidr> trusted = blocks({"10.0.0.0/8", "2001:db8:ffff::/48"});
    for (const xff_case& c : xff_cases) {
        SCOPED_TRACE(std::string(c.name));
        EXPECT_EQ(client_address(ip(c.peer), c.xff, trusted).to_string(), c.client);
    }
}

TEST(ClientAddress, NothingTrustedMeansPeer) {
    EXPECT_EQ(client_address(ip("10.0.0.1"), "203.0.113.7", {}), ip("10.0.0.1"));
}

TEST(ClientAddress, ParsesForwardedEntryForms) {
    EXPECT_EQ(parse_forwarded_entry(" 203.0.113.7:1 "), ip("203.0.113.7"));
    EXPECT_EQ(parse_forwarded_entry("[::1]"), ip("::1"));
    EXPECT_FALSE(parse_forwarded_entry("unknown"));
    EXPECT_FALSE(parse_forwarded_entry(""));
    EXPECT_FALSE(parse_forwarded_entry("[]"));
    EXPECT_FALSE(parse_forwarded_entry("[::1]:"));
    EXPECT_FALSE(parse_forwarded_entry("1.2.3.4:80:80"));
    EXPECT_FALSE(parse_forwarded_entry("1.2.3.4:+80"));
}

struct key_part_case {
    std::string_view address;
    int prefix;
    std::string_view part;
};

constexpr key_part_case key_part_cases[] = {
    {"203.0.113.7", 64, "203.0.113.7"},
    {"::ffff:203.0.113.7", 64, "203.0.113.7"},
    {"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64"},
    {"2001:db8:1:2::1", 64, "2001:db8:1:2::/64"},
    {"2001:db8:1:2:ffff::", 56, "2001:db8:1::/56"},
    {"2001:db8:1:2ff::", 56, "2001:db8:1:200::/56"},
    {"2001:db8::1", 128, "2001:db8::1"},
    {"2001:db8::1", 200, "2001:db8::1"},
    {"2001:db8::1", 0, "::/0"},
    {"2001:db8::1", -5, "::/0"},
    {"::1", 64, "::/64"},
    // NAT64's well-known prefix carries an IPv4 client: keyed by it, whatever the prefix.
    {"64:ff9b::203.0.113.7", 64, "203.0.113.7"},
    {"64:ff9b::cb00:7107", 128, "203.0.113.7"},
    {"64:ff9b::cb00:7107", 0, "203.0.113.7"},
    {"64:ff9b:1::cb00:7107", 64, "64:ff9b:1::/64"},
    {"64:ff9b::1:0:cb00:7107", 64, "64:ff9b::/64"},
};

TEST(ClientKeyPart, GroupsIpv6ByPrefix) {
    for (const key_part_case& c : key_part_cases) {
        SCOPED_TRACE(std::string(c.address) + " /" + std::to_string(c.prefix));
        EXPECT_EQ(client_key_part(ip(c.address), c.prefix), c.part);
    }
}

// The address's text made already (a connection's peer's) gives the same part as the address:
// what a plain address's part is, and nothing of a network's.
TEST(ClientKeyPart, TheAddressTextMadeAlreadyGivesTheSamePart) {
    for (const key_part_case& c : key_part_cases) {
        SCOPED_TRACE(std::string(c.address) + " /" + std::to_string(c.prefix));
        const auto address = ip(c.address);
        EXPECT_EQ(client_key_part(address, c.prefix, address.to_string()), c.part);
    }
}

// Behind a NAT64 gateway (SIIT-DC) every IPv4 client arrives in 64:ff9b::/96: keyed by its /64,
// one client could spend the limit of all of them.
TEST(ClientKeyPart, Nat64ClientsAreKeyedByTheirIpv4Address) {
    EXPECT_NE(client_key_part(ip("64:ff9b::198.51.100.1"), 64),
              client_key_part(ip("64:ff9b::198.51.100.2"), 64));
    EXPECT_EQ(client_key_part(ip("64:ff9b::198.51.100.1"), 64),
              client_key_part(ip("198.51.100.1"), 64))
        << "the same IPv4 host, translated or not";
}

TEST(ClientKeyPart, OneSlash64SharesABucket) {
    EXPECT_EQ(client_key_part(ip("2001:db8:0:7::1"), 64),
              client_key_part(ip("2001:db8:0:7:8000::42"), 64));
    EXPECT_NE(client_key_part(ip("2001:db8:0:7::1"), 64),
              client_key_part(ip("2001:db8:0:8::1"), 64));
}

} // namespace
} // namespace sluice::key
