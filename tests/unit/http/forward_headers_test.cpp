// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/forward_headers.hpp"
#include "sluice/http/response_head.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <memory_resource>
#include <string>
#include <vector>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

std::vector<std::string> names(const bhttp::fields& f) {
    std::vector<std::string> out;
    for (const auto& field : f) {
        out.emplace_back(field.name_string());
    }
    return out;
}

std::string value(const bhttp::fields& f, std::string_view name) {
    const auto it = f.find(name);
    return it == f.end() ? std::string("<absent>") : std::string(it->value());
}

TEST(StripHopByHop, RemovesTheFixedListAndWhatConnectionNames) {
    bhttp::fields f;
    f.insert("Host", "example.com");
    f.insert("Connection", "keep-alive, X-Session-Token");
    f.insert("Keep-Alive", "timeout=5");
    f.insert("Proxy-Connection", "keep-alive");
    f.insert("TE", "trailers");
    f.insert("Trailer", "Expires");
    f.insert("Upgrade", "websocket");
    f.insert("X-Session-Token", "secret");
    f.insert("Accept", "*/*");
    f.insert("Proxy-Authorization", "Basic eDp5");
    strip_hop_by_hop(f);
    EXPECT_EQ(names(f), (std::vector<std::string>{"Host", "Accept"}));
}

TEST(StripHopByHop, RemovesProxyCredentialsEvenWithoutConnection) {
    // The one pass that looks for anything to strip must see them on their own.
    bhttp::fields request;
    request.insert("Host", "example.com");
    request.insert("Proxy-Authorization", "Basic c2VjcmV0OnNlY3JldA==");
    strip_hop_by_hop(request);
    EXPECT_EQ(names(request), (std::vector<std::string>{"Host"}));

    bhttp::fields response;
    response.insert("Proxy-Authenticate", "Basic realm=\"proxy\"");
    response.insert("Content-Type", "text/plain");
    strip_hop_by_hop(response);
    EXPECT_EQ(names(response), (std::vector<std::string>{"Content-Type"}));
}

TEST(StripHopByHop, HonoursEveryConnectionLineCaseInsensitively) {
    bhttp::fields f;
    f.insert("Connection", "x-one");
    f.insert("connection", "X-TWO , close");
    f.insert("X-One", "1");
    f.insert("x-two", "2");
    f.insert("X-Three", "3");
    strip_hop_by_hop(f);
    EXPECT_EQ(names(f), (std::vector<std::string>{"X-Three"}));
}

TEST(StripHopByHop, NeverRemovesFramingNamedInConnection) {
    // A client must not be able to strip the framing the next hop relies on (smuggling).
    bhttp::fields f;
    f.insert("Host", "h");
    f.insert("Content-Length", "5");
    f.insert("Transfer-Encoding", "chunked");
    f.insert("Connection", "Content-Length, transfer-encoding, HOST");
    strip_hop_by_hop(f);
    EXPECT_EQ(names(f), (std::vector<std::string>{"Host", "Content-Length", "Transfer-Encoding"}));
}

TEST(StripHopByHop, LeavesAMessageWithoutThemAlone) {
    bhttp::fields f;
    f.insert("Content-Type", "text/plain");
    f.insert("Content-Length", "2");
    strip_hop_by_hop(f);
    EXPECT_EQ(names(f), (std::vector<std::string>{"Content-Type", "Content-Length"}));
}

TEST(AddForwardingHeaders, StartsTheChainWithThePeer) {
    bhttp::fields f;
    add_forwarding_headers(f, "10.0.0.7");
    EXPECT_EQ(value(f, "X-Forwarded-For"), "10.0.0.7");
    EXPECT_EQ(value(f, "X-Forwarded-Proto"), "http");
}

TEST(AddForwardingHeaders, AppendsThePeerToAnExistingChain) {
    bhttp::fields f;
    f.insert("X-Forwarded-For", "203.0.113.7, 10.0.0.1");
    add_forwarding_headers(f, "10.0.0.2");
    EXPECT_EQ(value(f, "X-Forwarded-For"), "203.0.113.7, 10.0.0.1, 10.0.0.2");
}

TEST(AddForwardingHeaders, JoinsSeveralLinesIntoOne) {
    bhttp::fields f;
    f.insert("X-Forwarded-For", "203.0.113.7");
    f.insert("x-forwarded-for", "   ");
    f.insert("X-Forwarded-For", "198.51.100.1");
    add_forwarding_headers(f, "::1");
    EXPECT_EQ(f.count("X-Forwarded-For"), 1u);
    EXPECT_EQ(value(f, "X-Forwarded-For"), "203.0.113.7, 198.51.100.1, ::1");
}

TEST(AddForwardingHeaders, ReplacesTheClientsProto) {
    bhttp::fields f;
    f.insert("X-Forwarded-Proto", "https");
    add_forwarding_headers(f, "127.0.0.1");
    EXPECT_EQ(f.count("X-Forwarded-Proto"), 1u);
    EXPECT_EQ(value(f, "X-Forwarded-Proto"), "http");
}

TEST(AppendForwardingLines, JoinsTheChainIntoLinesAndTakesTheClientsFieldsOut) {
    bhttp::fields f;
    f.insert("Host", "h");
    f.insert("X-Forwarded-For", "203.0.113.7");
    f.insert("x-forwarded-for", " ");
    f.insert("X-Forwarded-For", "198.51.100.1");
    f.insert("X-Forwarded-Proto", "https");
    std::string lines;
    append_forwarding_lines(f, "10.0.0.2", lines);
    EXPECT_EQ(lines,
              "X-Forwarded-For: 203.0.113.7, 198.51.100.1, 10.0.0.2\r\n"
              "X-Forwarded-Proto: http\r\n");
    EXPECT_EQ(names(f), (std::vector<std::string>{"Host"}));
}

TEST(AppendForwardingLines, StartsTheChainWithThePeer) {
    bhttp::fields f;
    std::string lines;
    append_forwarding_lines(f, "::1", lines);
    EXPECT_EQ(lines, "X-Forwarded-For: ::1\r\nX-Forwarded-Proto: http\r\n");
}

TEST(StripHopByHop, AConnectionOfKeepAliveOnlyRemovesItAndKeepAlive) {
    bhttp::fields f;
    f.insert("Connection", "Keep-Alive");
    f.insert("Keep-Alive", "timeout=5");
    f.insert("Server", "x");
    strip_hop_by_hop(f);
    EXPECT_EQ(names(f), (std::vector<std::string>{"Server"}));
}

// RFC 6455 1.3's example: a client's key and the accept that proves a server read it.
constexpr std::string_view sample_key = "dGhlIHNhbXBsZSBub25jZQ==";
constexpr std::string_view sample_accept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

// The request `fields` with `version` and `method`, for is_websocket_upgrade; with the sample
// Sec-WebSocket-Key unless `with_key` is false.
bhttp::request_header<> request_with(std::vector<std::pair<std::string, std::string>> fields,
                                     unsigned version = 11,
                                     bhttp::verb method = bhttp::verb::get,
                                     bool with_key = true) {
    bhttp::request_header<> req;
    req.version(version);
    req.method(method);
    for (const auto& [name, value] : fields) {
        req.insert(name, value);
    }
    if (with_key) {
        req.insert("Sec-WebSocket-Key", sample_key);
    }
    return req;
}

TEST(IsWebSocketUpgrade, NeedsConnectionUpgradeAndUpgradeWebSocketInAnyCase) {
    EXPECT_TRUE(
        is_websocket_upgrade(request_with({{"Connection", "Upgrade"}, {"Upgrade", "websocket"}})));
    EXPECT_TRUE(is_websocket_upgrade(
        request_with({{"connection", "keep-alive, upgrade"}, {"upgrade", "WebSocket"}})));
    // The tokens may sit in any of several lines, among others, with blanks around them.
    EXPECT_TRUE(is_websocket_upgrade(request_with({{"Connection", "keep-alive"},
                                                   {"Connection", " Upgrade "},
                                                   {"Upgrade", "h2c,  websocket"}})));
    EXPECT_FALSE(is_websocket_upgrade(request_with({{"Upgrade", "websocket"}})))
        << "Upgrade without Connection: upgrade is a field, not a request to upgrade";
    EXPECT_FALSE(is_websocket_upgrade(request_with({{"Connection", "Upgrade"}})));
    EXPECT_FALSE(
        is_websocket_upgrade(request_with({{"Connection", "Upgrade"}, {"Upgrade", "h2c"}})));
    EXPECT_FALSE(
        is_websocket_upgrade(request_with({{"Connection", "Upgrade"}, {"Upgrade", "websockets"}})));
    EXPECT_FALSE(
        is_websocket_upgrade(request_with({{"Connection", "upgraded"}, {"Upgrade", "websocket"}})));
}

// An IPv6 upstream's Host in brackets: "::1:9000" is no host and port (RFC 9110 7.2).
TEST(UpstreamHostField, IsTheHostInBracketsWhenIpv6AndItsPortUnless80) {
    EXPECT_EQ(upstream_host_field("backend", 80), "backend");
    EXPECT_EQ(upstream_host_field("backend", 8080), "backend:8080");
    EXPECT_EQ(upstream_host_field("10.0.0.5", 9000), "10.0.0.5:9000");
    EXPECT_EQ(upstream_host_field("::1", 9000), "[::1]:9000");
    EXPECT_EQ(upstream_host_field("2001:db8::7", 80), "[2001:db8::7]");
}

TEST(IsWebSocketUpgrade, OnlyAGetOfHttp11) {
    const std::vector<std::pair<std::string, std::string>> upgrade = {{"Connection", "Upgrade"},
                                                                      {"Upgrade", "websocket"}};
    EXPECT_FALSE(is_websocket_upgrade(request_with(upgrade, 10))) << "HTTP/1.0 has no Upgrade";
    EXPECT_FALSE(is_websocket_upgrade(request_with(upgrade, 11, bhttp::verb::post)));
    EXPECT_TRUE(is_websocket_upgrade(request_with(upgrade, 11, bhttp::verb::get)));
}

// Without its one key, an upgrade is no upgrade: there would be nothing for the answer to prove.
TEST(IsWebSocketUpgrade, NeedsOneSecWebSocketKeyOfAtMost24Bytes) {
    const std::vector<std::pair<std::string, std::string>> upgrade = {{"Connection", "Upgrade"},
                                                                      {"Upgrade", "websocket"}};
    EXPECT_FALSE(is_websocket_upgrade(request_with(upgrade, 11, bhttp::verb::get, false)));
    auto twice = request_with(upgrade);
    twice.insert("Sec-WebSocket-Key", sample_key);
    EXPECT_FALSE(is_websocket_upgrade(twice));
    auto empty = request_with(upgrade, 11, bhttp::verb::get, false);
    empty.insert("Sec-WebSocket-Key", "");
    EXPECT_FALSE(is_websocket_upgrade(empty));
    auto long_key = request_with(upgrade, 11, bhttp::verb::get, false);
    long_key.insert("Sec-WebSocket-Key", std::string(25, 'a'));
    EXPECT_FALSE(is_websocket_upgrade(long_key));
}

// A 101 accepts WebSocket when it lists it in Upgrade and proves, in one Sec-WebSocket-Accept,
// that it read the request's key: a 101 copied from the request's own fields would not.
TEST(AcceptsWebSocket, ListsWebSocketInUpgradeAndProvesItReadTheKey) {
    const auto switching = [](std::string_view upgrade, std::vector<std::string_view> accepts) {
        auto head = std::make_unique<response_head>(std::pmr::new_delete_resource());
        head->status = 101;
        if (!upgrade.empty()) {
            head->add(bhttp::field::upgrade, "Upgrade", upgrade);
        }
        for (const auto accept : accepts) {
            head->add(bhttp::field::sec_websocket_accept, "Sec-WebSocket-Accept", accept);
        }
        return head;
    };
    EXPECT_TRUE(accepts_websocket(*switching("WebSocket", {sample_accept}), sample_key));
    EXPECT_TRUE(accepts_websocket(*switching("h2c, websocket/13", {sample_accept}), sample_key));
    EXPECT_FALSE(accepts_websocket(*switching("", {sample_accept}), sample_key));
    EXPECT_FALSE(accepts_websocket(*switching("h2c", {sample_accept}), sample_key));
    EXPECT_FALSE(accepts_websocket(*switching("websocket", {}), sample_key)) << "no proof";
    EXPECT_FALSE(accepts_websocket(*switching("websocket", {sample_key}), sample_key))
        << "the key echoed is no proof";
    EXPECT_FALSE(
        accepts_websocket(*switching("websocket", {sample_accept}), "AAAAAAAAAAAAAAAAAAAAAA=="))
        << "another request's proof";
    EXPECT_FALSE(
        accepts_websocket(*switching("websocket", {sample_accept, sample_accept}), sample_key))
        << "two proofs";
}

} // namespace
} // namespace sluice::http
