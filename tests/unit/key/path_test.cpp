// SPDX-License-Identifier: Apache-2.0
#include "sluice/key/path.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>

namespace sluice::key {
namespace {

struct path_case {
    std::string_view target;
    std::optional<std::string_view> path; // nullopt: invalid target
};

const path_case path_cases[] = {
    // Plain paths and what is dropped.
    {"/", "/"},
    {"/a/b", "/a/b"},
    {"/a/b?x=1", "/a/b"},
    {"/a/b#frag", "/a/b"},
    {"/a/b?x=1#frag", "/a/b"},
    {"/?x", "/"},
    {"/a/b/", "/a/b/"}, // a trailing '/' names another resource: kept
    // Slashes and dot segments.
    {"/a//b/./c/../d?x=1", "/a/b/d"},
    {"//a///b", "/a/b"},
    {"/a//", "/a/"},
    {"/a/.", "/a/"},
    {"/a/./", "/a/"},
    {"/a/b/..", "/a/"},
    {"/a/b/../", "/a/"},
    {"/a/..", "/"},
    {"/..", "/"},
    {"/../../a", "/a"},
    {"/./a", "/a"},
    {"/a/../../b", "/b"},
    {"/a/.../b", "/a/.../b"}, // not a dot segment
    {"/a/..b/c", "/a/..b/c"},
    {"/a/.b", "/a/.b"},
    // Percent-encoding.
    {"/%7euser", "/~user"},
    {"/%7Euser", "/~user"},
    {"/%41", "/A"},
    {"/%61%62%63", "/abc"},
    {"/%2D%2e%5F%7E%30", "/-._~0"},
    {"/a%2fb", "/a%2Fb"}, // an encoded '/' is no separator
    {"/a%2Fb", "/a%2Fb"},
    {"/a%2f..%2fb", "/a%2F..%2Fb"},
    {"/%3a%40%21", "/%3A%40%21"}, // reserved characters stay encoded
    {"/caf%c3%a9", "/caf%C3%A9"},
    {"/%00", "/%00"},
    {"/%25", "/%25"},
    {"/%2541", "/%2541"}, // decoded once only
    {"/a/%2e/b", "/a/b"},
    {"/a/%2E%2e/b", "/b"},
    {"/a/b/.%2E", "/a/"},
    // Raw bytes a path may not hold are encoded like their escaped spelling.
    {"/a|b", "/a%7Cb"},
    {"/a%7cb", "/a%7Cb"},
    {"/{x}", "/%7Bx%7D"},
    {"/caf\xc3\xa9", "/caf%C3%A9"},
    {"/a\\b", "/a%5Cb"},
    // Characters a path may hold are kept.
    {"/a:b@c!$&'()*+,;=", "/a:b@c!$&'()*+,;="},
    // Absolute-form.
    {"http://h/x", "/x"},
    {"http://example.com:8080/a//b?q", "/a/b"},
    {"HTTPS://example.com/%7e", "/~"},
    {"http://h", "/"},
    {"http://h?x=/a", "/"},
    {"http://h#/a", "/"},
    {"http://user@h/a", "/a"},
    // Invalid targets.
    {"", std::nullopt},
    {"abc", std::nullopt},
    {"*", std::nullopt},
    {"a/b", std::nullopt},
    {"ftp://h/x", std::nullopt},
    {"http:/x", std::nullopt},
    {"http:///x", std::nullopt},
    {"/%zz", std::nullopt},
    {"/%G1", std::nullopt},
    {"/%4", std::nullopt},
    {"/%4/", std::nullopt},
    {"/%", std::nullopt},
    {"/a%", std::nullopt},
    {"/%4?x", std::nullopt},
    {"/a b", std::nullopt},
    {"/a\tb", std::nullopt},
    {"/a\x7f", std::nullopt},
    {"/a?x y", std::nullopt},
    {"/a\r\n", std::nullopt},
    {std::string_view("/a\0b", 4), std::nullopt},
    {"http://h h/x", std::nullopt},
};

TEST(NormalizePath, Table) {
    for (const path_case& c : path_cases) {
        SCOPED_TRACE(std::string(c.target));
        const std::optional<std::string> got = normalize_path(c.target);
        if (!c.path) {
            EXPECT_FALSE(got.has_value()) << *got;
            continue;
        }
        ASSERT_TRUE(got.has_value());
        EXPECT_EQ(*got, *c.path);
    }
}

TEST(NormalizePath, IsIdempotent) {
    // The output is its own canonical form, so a rule written in it matches itself.
    for (const path_case& c : path_cases) {
        if (!c.path) {
            continue;
        }
        SCOPED_TRACE(std::string(c.target));
        const std::optional<std::string> again = normalize_path(*c.path);
        ASSERT_TRUE(again.has_value());
        EXPECT_EQ(*again, *c.path);
    }
}

TEST(NormalizePath, SpellingsShareOneEndpoint) {
    const std::string_view spellings[] = {
        "/v1/models/m1",
        "/v1//models/m1",
        "/v1/./models/m1?stream=true",
        "/v1/x/../models/m1",
        "/%76%31/models/%6d1",
        "http://backend/v1/models/m1",
    };
    for (std::string_view s : spellings) {
        EXPECT_EQ(normalize_path(s), std::optional<std::string>("/v1/models/m1")) << s;
    }
}

} // namespace
} // namespace sluice::key
