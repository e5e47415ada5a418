// SPDX-License-Identifier: Apache-2.0
#include "sluice/key/cidr.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>

namespace sluice::key {
namespace {

struct format_case {
    std::string_view text;
    std::string_view canonical; // empty: the text must be rejected
    bool v4;
};

// Every accepted spelling, with its canonical text; every rejected one with "".
constexpr format_case format_cases[] = {
    // IPv4
    {"0.0.0.0", "0.0.0.0", true},
    {"203.0.113.7", "203.0.113.7", true},
    {"255.255.255.255", "255.255.255.255", true},
    {"10.0.0.1", "10.0.0.1", true},
    {"010.1.1.1", "", true},
    {"1.01.1.1", "", true},
    {"00.1.1.1", "", true},
    {"256.1.1.1", "", true},
    {"1.2.3", "", true},
    {"1.2.3.4.5", "", true},
    {"1.2.3.", "", true},
    {".1.2.3", "", true},
    {"1..2.3", "", true},
    {"1.2.3.4 ", "", true},
    {" 1.2.3.4", "", true},
    {"1.2.3.-4", "", true},
    {"1.2.3.1000", "", true},
    {"0x1.2.3.4", "", true},
    {"", "", true},
    {"localhost", "", true},
    // IPv6
    {"::", "::", false},
    {"::1", "::1", false},
    {"1::", "1::", false},
    {"2001:db8::1", "2001:db8::1", false},
    {"2001:DB8::1", "2001:db8::1", false},
    {"2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1", false},
    {"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1", false},    // first of two equal runs
    {"2001:0:0:1:0:0:0:1", "2001:0:0:1::1", false},          // the longest run
    {"2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1", false}, // one zero group: no "::"
    {"2001:db8::1:1:1:1:1", "2001:db8:0:1:1:1:1:1", false},  // "::" for one group is accepted
    {"1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0", false},
    {"::2:3:4:5:6:7:8", "0:2:3:4:5:6:7:8", false},
    {"1:0:0:0:0:0:0:0", "1::", false},
    {"fe80::1:2", "fe80::1:2", false},
    {"::1.2.3.4", "::102:304", false}, // IPv4-compatible (deprecated): plain IPv6
    {"64:ff9b::192.0.2.33", "64:ff9b::c000:221", false},
    {"1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304", false},
    {"1:2:3:4:5:6:7:8:9", "", false},
    {"1:2:3:4:5:6:7", "", false},
    {"1:2:3:4:5:6:7:8::", "", false},
    {"::1:2:3:4:5:6:7:8", "", false},
    {"1::2::3", "", false},
    {":::", "", false},
    {":1::", "", false},
    {"1::2:", "", false},
    {"1:", "", false},
    {":", "", false},
    {"12345::", "", false},
    {"g::1", "", false},
    {"fe80::1%eth0", "", false},
    {"[::1]", "", false},
    {"::1.2.3", "", false},
    {"::01.2.3.4", "", false},
    {"1:2:3:4:5:6:7:1.2.3.4", "", false},
    {"::1.2.3.4:5", "", false},
    // IPv4-mapped IPv6 is stored and printed as IPv4.
    {"::ffff:192.0.2.1", "192.0.2.1", true},
    {"::FFFF:c000:0201", "192.0.2.1", true},
    {"0:0:0:0:0:ffff:10.0.0.1", "10.0.0.1", true},
};

TEST(IpAddress, ParsesAndFormatsTable) {
    for (const format_case& c : format_cases) {
        SCOPED_TRACE(std::string(c.text));
        const std::optional<ip_address> a = ip_address::parse(c.text);
        if (c.canonical.empty()) {
            EXPECT_FALSE(a.has_value());
            continue;
        }
        ASSERT_TRUE(a.has_value());
        EXPECT_EQ(a->v4, c.v4);
        EXPECT_EQ(a->to_string(), c.canonical);
        // The canonical text parses back to the same address.
        EXPECT_EQ(ip_address::parse(a->to_string()), a);
    }
}

TEST(IpAddress, MappedEqualsPlainIpv4) {
    EXPECT_EQ(ip_address::parse("::ffff:203.0.113.7"), ip_address::parse("203.0.113.7"));
    EXPECT_NE(ip_address::parse("::203.0.113.7"), ip_address::parse("203.0.113.7"));
}

TEST(IpAddress, StoresNetworkOrderBytes) {
    const auto a = ip_address::parse("2001:db8::ff01");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->bytes[0], 0x20);
    EXPECT_EQ(a->bytes[1], 0x01);
    EXPECT_EQ(a->bytes[14], 0xff);
    EXPECT_EQ(a->bytes[15], 0x01);
    const auto b = ip_address::parse("192.0.2.1");
    ASSERT_TRUE(b);
    EXPECT_EQ(b->bytes[0], 192);
    EXPECT_EQ(b->bytes[3], 1);
}

struct cidr_case {
    std::string_view text;
    std::string_view canonical; // empty: rejected
};

constexpr cidr_case cidr_cases[] = {
    {"10.0.0.0/8", "10.0.0.0/8"},
    {"10.1.2.3/8", "10.0.0.0/8"}, // host bits masked off
    {"192.168.1.77/26", "192.168.1.64/26"},
    {"203.0.113.7", "203.0.113.7/32"},
    {"0.0.0.0/0", "0.0.0.0/0"},
    {"1.2.3.4/0", "0.0.0.0/0"},
    {"2001:db8::/32", "2001:db8::/32"},
    {"2001:db8:ffff::1/33", "2001:db8:8000::/33"},
    {"::1", "::1/128"},
    {"::/0", "::/0"},
    {"::ffff:10.0.0.0/104", "10.0.0.0/8"},
    {"::ffff:10.1.2.3", "10.1.2.3/32"},
    {"10.0.0.0/33", ""},
    {"2001:db8::/129", ""},
    {"::ffff:10.0.0.0/95", ""},
    {"10.0.0.0/", ""},
    {"10.0.0.0/-1", ""},
    {"10.0.0.0/08", ""},
    {"10.0.0.0/8/8", ""},
    {"10.0.0.0/ 8", ""},
    {"/8", ""},
    {"", ""},
    {"010.0.0.0/8", ""},
};

TEST(Cidr, ParsesAndFormatsTable) {
    for (const cidr_case& c : cidr_cases) {
        SCOPED_TRACE(std::string(c.text));
        const std::optional<cidr> block = cidr::parse(c.text);
        if (c.canonical.empty()) {
            EXPECT_FALSE(block.has_value());
            continue;
        }
        ASSERT_TRUE(block.has_value());
        EXPECT_EQ(block->to_string(), c.canonical);
        EXPECT_EQ(cidr::parse(block->to_string()), block);
    }
}

struct contains_case {
    std::string_view block;
    std::string_view address;
    bool inside;
};

constexpr contains_case contains_cases[] = {
    {"10.0.0.0/8", "10.255.255.255", true},
    {"10.0.0.0/8", "11.0.0.0", false},
    {"10.0.0.0/8", "9.255.255.255", false},
    {"192.168.1.64/26", "192.168.1.127", true},
    {"192.168.1.64/26", "192.168.1.128", false},
    {"192.168.1.64/26", "192.168.1.63", false},
    {"203.0.113.7", "203.0.113.7", true},
    {"203.0.113.7", "203.0.113.8", false},
    {"0.0.0.0/0", "198.51.100.1", true},
    {"0.0.0.0/0", "::1", false}, // families never mix
    {"::/0", "198.51.100.1", false},
    {"::/0", "2001:db8::1", true},
    {"2001:db8::/32", "2001:db8:ffff:ffff::1", true},
    {"2001:db8::/32", "2001:db9::1", false},
    {"2001:db8::/33", "2001:db8:7fff::1", true},
    {"2001:db8::/33", "2001:db8:8000::1", false},
    {"::1", "::1", true},
    {"::1", "::2", false},
    {"10.0.0.0/8", "::ffff:10.9.8.7", true}, // mapped is IPv4
    {"::ffff:10.0.0.0/104", "10.9.8.7", true},
    {"::ffff:10.0.0.0/104", "::ffff:11.0.0.1", false},
};

TEST(Cidr, ContainsTable) {
    for (const contains_case& c : contains_cases) {
        SCOPED_TRACE(std::string(c.block) + " " + std::string(c.address));
        const auto block = cidr::parse(c.block);
        const auto address = ip_address::parse(c.address);
        ASSERT_TRUE(block);
        ASSERT_TRUE(address);
        EXPECT_EQ(block->contains(*address), c.inside);
    }
}

} // namespace
} // namespace sluice::key
