// SPDX-License-Identifier: Apache-2.0
#include "sluice/key/rate_limit_key.hpp"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::key {
namespace {

using kind = config::rule::match_kind;
using part = config::key_part;

config::rule make_rule(std::string name, std::string path, std::vector<std::string> methods = {}) {
    config::rule r;
    r.name = std::move(name);
    r.kind = classify_pattern(path);
    r.path = std::move(path);
    r.methods = std::move(methods);
    return r;
}

TEST(MakeKey, IsThePagesKey) {
    EXPECT_EQ(make_key("203.0.113.7", "/v1/infer"), "rate-limit:203.0.113.7:/v1/infer");
    EXPECT_EQ(make_key("2001:db8::/64", "/"), "rate-limit:2001:db8::/64:/");
}

TEST(ClassifyPattern, FromSpelling) {
    EXPECT_EQ(classify_pattern("/v1/models"), kind::exact);
    EXPECT_EQ(classify_pattern("/"), kind::exact);
    EXPECT_EQ(classify_pattern("/v1/models/*"), kind::prefix);
    EXPECT_EQ(classify_pattern("/*"), kind::prefix);
    EXPECT_EQ(classify_pattern("/v1/model*"), kind::prefix);
    EXPECT_EQ(classify_pattern("*"), kind::prefix);
    EXPECT_EQ(classify_pattern("/v1/*/infer"), kind::glob);
    EXPECT_EQ(classify_pattern("/v1/*/items/*"), kind::glob);
}

struct match_case {
    std::string_view method;
    std::string_view path;
    std::string_view rule; // expected rule name, "" for none
};

TEST(MatchRule, FirstMatchInOrder) {
    const std::vector<config::rule> rules = {
        make_rule("post-infer", "/v1/infer", {"POST"}),
        make_rule("infer-any", "/v1/infer"),
        make_rule("models-get", "/v1/models/*", {"GET", "HEAD"}),
        make_rule("model-prefix", "/v1/model-*"),
        make_rule("items", "/v2/*/items"),
        make_rule("nested", "/v3/*/items/*"),
        make_rule("ext", "/files/*.json"),
        make_rule("root", "/"),
    };
    const match_case cases[] = {
        {"POST", "/v1/infer", "post-infer"},
        {"GET", "/v1/infer", "infer-any"},
        {"post", "/v1/infer", "infer-any"}, // methods are case-sensitive
        {"POST", "/v1/infer/", ""},         // exact means exact
        {"GET", "/v1/models/1", "models-get"},
        {"HEAD", "/v1/models/a/b", "models-get"},
        {"GET", "/v1/models/", "models-get"},
        {"GET", "/v1/models", ""}, // the prefix rule needs something after "/v1/models/"
        {"POST", "/v1/models/1", ""},
        {"GET", "/v1/modelsx/1", ""},
        {"GET", "/v1/model-a", "model-prefix"},
        {"GET", "/v1/model-", "model-prefix"}, // '*' may match nothing
        {"GET", "/v1/model-a/b", "model-prefix"},
        {"GET", "/v1/model", ""},
        {"GET", "/v2/x/items", "items"},
        {"GET", "/v2/items", ""},
        {"GET", "/v2/x/y/items", ""},
        {"GET", "/v2/x/items/1", ""},
        {"GET", "/v3/x/items/1", "nested"},
        {"GET", "/v3/x/items/", "nested"}, // a glob '*' may match an empty segment
        {"GET", "/v3/x/items/1/2", ""},    // a glob '*' stays within its segment
        {"GET", "/v3/x/items", ""},
        {"GET", "/v3/x/y/items/1", ""},
        {"GET", "/files/a.json", "ext"},
        {"GET", "/files/a.b.json", "ext"},
        {"GET", "/files/a.json.bak", ""},
        {"GET", "/files/d/a.json", ""},
        {"GET", "/", "root"},
        {"GET", "/other", ""},
    };
    for (const match_case& c : cases) {
        SCOPED_TRACE(std::string(c.method) + " " + std::string(c.path));
        const config::rule* r = match_rule(rules, c.method, c.path);
        if (c.rule.empty()) {
            EXPECT_EQ(r, nullptr) << r->name;
        } else {
            ASSERT_NE(r, nullptr);
            EXPECT_EQ(r->name, c.rule);
        }
    }
}

TEST(MatchRule, CatchAllPrefixAndEmptyRules) {
    const std::vector<config::rule> rules = {make_rule("all", "/*")};
    ASSERT_NE(match_rule(rules, "GET", "/"), nullptr);
    ASSERT_NE(match_rule(rules, "GET", "/a/b/c"), nullptr);
    EXPECT_EQ(match_rule({}, "GET", "/"), nullptr);
}

TEST(MatchRule, PrefixKindWithInnerStarIsAGlob) {
    // Only code can build this (the loader classifies by spelling): it must still match sanely.
    config::rule r = make_rule("odd", "/v1/*/x*");
    r.kind = kind::prefix;
    const std::vector<config::rule> rules = {r};
    EXPECT_NE(match_rule(rules, "GET", "/v1/a/xy"), nullptr);
    EXPECT_EQ(match_rule(rules, "GET", "/v1/a/xy/z"), nullptr);
    EXPECT_EQ(match_rule(rules, "GET", "/v1/*/xy"), match_rule(rules, "GET", "/v1/q/xy"));
}

TEST(MatchRule, PrefixWithoutSlash) {
    const std::vector<config::rule> rules = {make_rule("v1", "/v1*")};
    EXPECT_NE(match_rule(rules, "GET", "/v1"), nullptr);
    EXPECT_NE(match_rule(rules, "GET", "/v1beta/x"), nullptr);
    EXPECT_NE(match_rule(rules, "GET", "/v1/a/b"), nullptr);
    EXPECT_EQ(match_rule(rules, "GET", "/v2"), nullptr);
}

TEST(MatchRule, GlobBacktracks) {
    const std::vector<config::rule> rules = {make_rule("g", "/a*b*c")};
    EXPECT_NE(match_rule(rules, "GET", "/abxbyc"), nullptr);
    EXPECT_NE(match_rule(rules, "GET", "/abcbc"), nullptr);
    EXPECT_EQ(match_rule(rules, "GET", "/abxbycd"), nullptr);
}

config::limit limit_with(std::vector<part> key) {
    config::limit l;
    l.key = std::move(key);
    return l;
}

// A header table for the lookups; HTTP's case-insensitivity is the callable's business.
struct fake_headers {
    std::map<std::string, std::string, std::less<>> values;

    std::optional<std::string_view> operator()(std::string_view name) const {
        const auto it = values.find(name);
        if (it == values.end()) {
            return std::nullopt;
        }
        return std::string_view(it->second);
    }
};

TEST(LimitKey, DefaultKeyIsMakeKey) {
    const config::limit l; // [ip, endpoint]
    EXPECT_EQ(limit_key(l, "203.0.113.7", "/v1/infer", {}), make_key("203.0.113.7", "/v1/infer"));
    EXPECT_EQ(limit_key(l, "2001:db8::/64", "/", {}), make_key("2001:db8::/64", "/"));
}

TEST(LimitKey, EachDimension) {
    const fake_headers headers{{{"X-Api-Key", "k-123"}, {"X-Empty", ""}}};
    const std::string_view ip = "203.0.113.7";
    const std::string_view ep = "/v1/models/*";

    struct key_case {
        std::vector<part> key;
        std::string_view expected;
    };

    const key_case cases[] = {
        {{{part::kind::ip, {}, {}}}, "rate-limit:203.0.113.7"},
        {{{part::kind::endpoint, {}, {}}}, "rate-limit:/v1/models/*"},
        {{{part::kind::global, {}, {}}}, "rate-limit:*"},
        {{{part::kind::header, "X-Api-Key", {}}}, "rate-limit:h=k-123"},
        {{{part::kind::header, "X-Missing", {}}}, "rate-limit:203.0.113.7"},
        {{{part::kind::header, "X-Empty", {}}}, "rate-limit:203.0.113.7"},
        {{{part::kind::header, "X-Api-Key", {}}, {part::kind::endpoint, {}, {}}},
         "rate-limit:h=k-123:/v1/models/*"},
        {{{part::kind::endpoint, {}, {}}, {part::kind::ip, {}, {}}},
         "rate-limit:/v1/models/*:203.0.113.7"},
        {{{part::kind::global, {}, {}}, {part::kind::endpoint, {}, {}}},
         "rate-limit:*:/v1/models/*"},
        {{}, "rate-limit:*"},
    };
    for (const key_case& c : cases) {
        SCOPED_TRACE(std::string(c.expected));
        EXPECT_EQ(limit_key(limit_with(c.key), ip, ep, headers), c.expected);
    }
}

// A header's or JSON field's value has '%', ':', '{' and '}' percent-encoded: a ':' could make
// one client's parts read as another's, and a "{...}" ahead of the key's own hash tag would
// choose its Redis Cluster slot. One to one: a value that holds "%3A" stays apart from ":".
TEST(LimitKey, HeaderAndJsonValuesEscapeSeparatorsAndHashTags) {
    const fake_headers headers{
        {{"X-Tenant", "{z}:h=y%"}, {"X-Colon", "a:b"}, {"X-Encoded", "a%3Ab"}}};
    const std::string_view ip = "{203.0.113.7}";
    const auto key = [&](std::string_view header) {
        return limit_key(
            limit_with({{part::kind::header, std::string(header), {}}, {part::kind::ip, {}, {}}}),
            ip,
            "/",
            headers);
    };
    EXPECT_EQ(key("X-Tenant"), "rate-limit:h=%7Bz%7D%3Ah=y%25:{203.0.113.7}");
    EXPECT_EQ(key("X-Colon"), "rate-limit:h=a%3Ab:{203.0.113.7}");
    EXPECT_EQ(key("X-Encoded"), "rate-limit:h=a%253Ab:{203.0.113.7}");
    auto fields = [](std::string_view) -> std::optional<std::string_view> {
        return "t{1}";
    };
    EXPECT_EQ(limit_key(limit_with({{part::kind::json, {}, *parse_json_path("tenant")}}),
                        ip,
                        "/",
                        headers,
                        fields),
              "rate-limit:j=t%7B1%7D");
}

// The values a client may spell many ways while the upstream reads them as one are keyed in one
// spelling: a Host's case and trailing dot, and the scheme of credentials (its case, the spaces
// after it). Credentials themselves are case-sensitive; other headers go as sent.
TEST(LimitKey, HostAndCredentialsAreKeyedInOneSpelling) {
    const auto key = [](std::string_view header, std::string value) {
        const fake_headers headers{{{std::string(header), std::move(value)}}};
        return limit_key(
            limit_with({{part::kind::header, std::string(header), {}}}), "ip", "/", headers);
    };
    EXPECT_EQ(key("Host", "Api.Example.COM"), "rate-limit:h=api.example.com");
    EXPECT_EQ(key("host", "api.example.com."), "rate-limit:h=api.example.com");
    EXPECT_EQ(key("Host", "API.example.com.:8443"), "rate-limit:h=api.example.com%3A8443");
    EXPECT_EQ(key("Host", "api.example.com:"), "rate-limit:h=api.example.com");
    EXPECT_EQ(key("Host", "api.example.com:00080"), "rate-limit:h=api.example.com%3A80");
    EXPECT_EQ(key("Host", "a:000"), "rate-limit:h=a%3A0");
    EXPECT_EQ(key("Host", "[FE80:0::1]:80"), "rate-limit:h=[fe80%3A%3A1]%3A80");
    EXPECT_EQ(key("Host", "[fe80::1]"), "rate-limit:h=[fe80%3A%3A1]");
    EXPECT_EQ(key("Host", "[::FFFF:1.2.3.4]"), "rate-limit:h=[%3A%3Affff%3A1.2.3.4]");
    EXPECT_EQ(key("Host", "."), "rate-limit:h=.");
    EXPECT_EQ(key("Host", "127.0.0.1:8080"), "rate-limit:h=127.0.0.1%3A8080");

    EXPECT_EQ(key("Authorization", "Bearer Tok-En"), "rate-limit:h=bearer Tok-En");
    EXPECT_EQ(key("authorization", "BEARER   Tok-En"), "rate-limit:h=bearer Tok-En");
    EXPECT_EQ(key("Authorization", "bearer Tok-En"), "rate-limit:h=bearer Tok-En");
    EXPECT_NE(key("Authorization", "Bearer tok-en"), key("Authorization", "Bearer Tok-En"));
    EXPECT_EQ(key("Proxy-Authorization", "Basic QWxh:ZGlu"), "rate-limit:h=basic QWxh%3AZGlu");
    // No space, no scheme to tell: a bare key, whose case matters (and a tab is no separator).
    EXPECT_EQ(key("Authorization", "sk-AbC"), "rate-limit:h=sk-AbC");
    EXPECT_NE(key("Authorization", "sk-AbC"), key("Authorization", "sk-abc"));
    EXPECT_EQ(key("Authorization", "Bearer\tAbC"), "rate-limit:h=Bearer\tAbC");
    EXPECT_EQ(key("Authorization", "Negotiate "), "rate-limit:h=negotiate");

    EXPECT_EQ(key("X-Api-Key", "Key-ABC"), "rate-limit:h=Key-ABC");
}

// A `json:` part takes the body field's text as the JSON finder gave it (shortened when long),
// unless it is missing, empty or holds a control character: then the client's part.
TEST(LimitKey, JsonPartsTakePrintableValuesOnly) {
    const std::string long_value(max_key_part + 1, 'm');
    const std::string longest(max_key_part, 'm');
    auto fields = [&](std::string_view path) -> std::optional<std::string_view> {
        if (path == "model") {
            return "gpt-x";
        }
        if (path == "tenant.id") {
            return "42";
        }
        if (path == "long") {
            return long_value;
        }
        if (path == "longest") {
            return longest;
        }
        if (path == "newline") {
            return "a\nb";
        }
        if (path == "empty") {
            return "";
        }
        return std::nullopt;
    };
    const auto json = [](std::string_view path) {
        return part{part::kind::json, {}, *parse_json_path(path)};
    };
    const std::string_view ip = "203.0.113.7";

    const struct {
        std::string_view path;
        std::string expected;
    } cases[] = {
        {"model", "rate-limit:j=gpt-x"},
        {"tenant.id", "rate-limit:j=42"},
        {"longest", "rate-limit:j=" + longest},
        // FNV-1a 64 of 257 'm's, computed apart (python3).
        {"long", "rate-limit:j=" + std::string(240, 'm') + "~615a56108e2af258"},
        {"newline", "rate-limit:203.0.113.7"},
        {"empty", "rate-limit:203.0.113.7"},
        {"missing", "rate-limit:203.0.113.7"},
    };

    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(c.path));
        EXPECT_EQ(limit_key(limit_with({json(c.path)}), ip, "/", {}, fields), c.expected);
    }
    // Without a JSON lookup (no body read), the client's part.
    EXPECT_EQ(limit_key(limit_with({json("model")}), ip, "/", {}), "rate-limit:203.0.113.7");
}

// A header value or path longer than max_key_part is written as its first 240 bytes, '~' and
// its 64-bit FNV-1a digest (the figures below computed apart, with python3): a key stays short
// whatever a client sends, and distinct values keep distinct keys.
TEST(LimitKey, LongPartsAreShortenedToTheirDigest) {
    const std::string key_1000(1000, 'k');
    const std::string key_999z = std::string(999, 'k') + "z";
    const std::string path_300 = "/" + std::string(299, 'p');
    const std::string longest(max_key_part, 'k');
    const fake_headers one{{{"X-Api-Key", key_1000}}};
    const fake_headers other{{{"X-Api-Key", key_999z}}};
    const fake_headers whole{{{"X-Api-Key", longest}}};
    const auto by_key = limit_with({part{part::kind::header, "X-Api-Key", {}}});
    const auto by_path =
        limit_with({part{part::kind::ip, {}, {}}, part{part::kind::endpoint, {}, {}}});

    const std::string head(240, 'k');
    EXPECT_EQ(limit_key(by_key, "203.0.113.7", "/", one),
              "rate-limit:h=" + head + "~156dfe4694b8e4fd");
    EXPECT_EQ(limit_key(by_key, "203.0.113.7", "/", other),
              "rate-limit:h=" + head + "~156e0d4694b8fe7a");
    EXPECT_EQ(limit_key(by_key, "203.0.113.7", "/", whole), "rate-limit:h=" + longest);

    const std::string shortened_path = path_300.substr(0, 240) + "~df612a815a02b7da";
    EXPECT_EQ(limit_key(by_path, "203.0.113.7", path_300, {}),
              "rate-limit:203.0.113.7:" + shortened_path);
    EXPECT_EQ(make_key("203.0.113.7", path_300), "rate-limit:203.0.113.7:" + shortened_path);
}

TEST(LimitKey, ManyPartsBeyondTheCache) {
    std::vector<part> key(10, part{part::kind::header, "X-Api-Key", {}});
    key.push_back({part::kind::ip, {}, {}});
    const fake_headers headers{{{"X-Api-Key", "k"}}};
    std::string expected = "rate-limit:";
    for (int i = 0; i < 10; ++i) {
        expected += "h=k:";
    }
    expected += "198.51.100.1";
    EXPECT_EQ(limit_key(limit_with(key), "198.51.100.1", "/", headers), expected);
}

TEST(LimitKey, LooksUpEachHeaderOnce) {
    int calls = 0;
    auto lookup = [&calls](std::string_view) -> std::optional<std::string_view> {
        ++calls;
        return "v";
    };
    const config::limit l =
        limit_with({{part::kind::header, "A", {}}, {part::kind::header, "B", {}}});
    EXPECT_EQ(limit_key(l, "1.2.3.4", "/", lookup), "rate-limit:h=v:h=v");
    EXPECT_EQ(calls, 2);
}

// --- the keys of a request's limits ---------------------------------------------------------

std::vector<std::string>
keys_of(const config::rule* rule, const std::vector<config::limit>& limits, std::string_view path) {
    const auto keys = request_limit_keys(
        rule, limits, rule ? std::string_view(rule->name) : "fallback", "203.0.113.7", path, {});
    return {keys.begin(), keys.end()};
}

const config::limit page_limit; // [ip, endpoint]

TEST(RequestLimitKeys, TheFallbackOwnsThePagesKey) {
    EXPECT_EQ(keys_of(nullptr, {page_limit}, "/x"),
              std::vector<std::string>{"rate-limit:203.0.113.7:/x"});
}

TEST(RequestLimitKeys, TheFirstIpEndpointLimitOwnsThePagesKeyTheRestAreScoped) {
    auto rule = make_rule("api", "/v1/infer");
    const std::vector<config::limit> limits = {
        limit_with({{part::kind::ip, {}, {}}}),
        page_limit,
        page_limit,
        limit_with({{part::kind::global, {}, {}}}),
    };
    EXPECT_EQ(keys_of(&rule, limits, "/v1/infer"),
              (std::vector<std::string>{"rate-limit:api#0:203.0.113.7",
                                        "rate-limit:203.0.113.7:/v1/infer",
                                        "rate-limit:api#2:203.0.113.7:/v1/infer",
                                        "rate-limit:api#3:*"}));
}

// A method-filtered rule shares its path with whatever serves the other methods: it never owns
// the page's key.
TEST(RequestLimitKeys, AMethodFilteredRuleIsAlwaysScoped) {
    auto rule = make_rule("posts", "/v1/infer", {"POST"});
    EXPECT_EQ(keys_of(&rule, {page_limit}, "/v1/infer"),
              std::vector<std::string>{"rate-limit:posts#0:203.0.113.7:/v1/infer"});
}

// Prefix and glob rules key by their pattern: one bucket for every path they match.
TEST(RequestLimitKeys, PatternRulesKeyByThePattern) {
    auto prefix = make_rule("models", "/v1/models/*");
    EXPECT_EQ(keys_of(&prefix, {page_limit}, "/v1/models/7"),
              std::vector<std::string>{"rate-limit:203.0.113.7:/v1/models/*"});
    auto glob = make_rule("infer", "/v1/*/infer");
    EXPECT_EQ(keys_of(&glob, {page_limit, page_limit}, "/v1/a/infer"),
              (std::vector<std::string>{"rate-limit:203.0.113.7:/v1/*/infer",
                                        "rate-limit:infer#1:203.0.113.7:/v1/*/infer"}));
}

} // namespace
} // namespace sluice::key
