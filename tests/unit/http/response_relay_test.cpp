// SPDX-License-Identifier: Apache-2.0
// The response relay's header step on its own (prepare_response): what an upstream response's
// header becomes before it goes to the client. No socket is connected: the forward arguments
// only need to exist.
#include "http/forwarder_detail.hpp"
#include "sluice/upstream/pool.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace sluice::http::detail {
namespace {

class ResponseRelayHeader : public ::testing::Test {
protected:
    /// The client's request, read whole (a bodyless GET) unless a test reads another.
    void SetUp() override { read_request("GET / HTTP/1.1\r\nHost: test\r\n\r\n"); }

    void read_request(std::string_view text) {
        error_code ec;
        request_.put(net::buffer(text.data(), text.size()), ec);
        EXPECT_TRUE(!ec || ec == bhttp::error::need_buffer) << ec.message();
    }

    /// The upstream's response header `text`, parsed, then prepared for a client that spoke
    /// HTTP/1.`minor`; returns whether the client connection stays open.
    bool prepare(const std::string& text, unsigned minor = 1, bool draining = false) {
        draining_ = draining;
        parse(text, minor);
        return prepare_response(args_, *response_);
    }

    /// The upstream's response header `text`, parsed only, for a client of HTTP/1.`minor`.
    void parse(const std::string& text, unsigned minor = 1) {
        args_.reply.version = 10 + minor;
        response_.emplace(arena_.allocator().resource());
        error_code ec;
        response_->header_limit(64 * 1024);
        response_->put(net::buffer(text), ec);
        EXPECT_TRUE(!ec || ec == bhttp::error::need_buffer) << ec.message();
    }

    /// As `parse`, but the head comes in two puts, the first `first` bytes long: Beast's parser
    /// reads it from the first byte (sluice's scan takes only a head that came whole).
    error_code parse_in_pieces(const std::string& text, std::size_t first) {
        args_.reply.version = 11;
        response_.emplace(arena_.allocator().resource());
        response_->header_limit(64 * 1024);
        error_code ec;
        const auto used = response_->put(net::buffer(text.data(), first), ec);
        EXPECT_EQ(ec, bhttp::error::need_more);
        response_->put(net::buffer(text.data() + used, text.size() - used), ec);
        return ec;
    }

    /// The names of the prepared head's fields, in order, one line each.
    std::string names() const {
        std::string out;
        for (const auto& f : response_->head()) {
            out.append(f.name_string()).append("\n");
        }
        return out;
    }

    /// How many fields of the prepared head are called `name` (ignoring case).
    std::size_t count(std::string_view name) const {
        const auto& head = response_->head();
        return static_cast<std::size_t>(
            std::count_if(head.begin(), head.end(), [name](const head_field& f) {
                return beast::iequals(f.name_string(), name);
            }));
    }

    net::io_context ioc_;
    executor ex_{ioc_.get_executor()};
    timed_stream client_{ex_};
    beast::flat_buffer client_buffer_;
    header_arena arena_;
    request_parser request_{
        std::piecewise_construct, std::make_tuple(), std::make_tuple(arena_.allocator())};
    upstream::pool pool_{ex_};
    config::config config_;
    header_scratch scratch_;
    buffer_pool buffers_{relay_buffer_size, 1};
    bool draining_ = false;
    metrics::gauge body_bytes_{0};
    buffered_body body_ahead_{body_bytes_};

    /// The forwarder's arguments for the request `parser` read, from a kept-alive client.
    forward_args args_for(request_parser& parser) {
        return {client_,
                client_buffer_,
                parser,
                arena_,
                pool_,
                config_,
                "203.0.113.7",
                {},
                true,
                false,
                &draining_,
                scratch_,
                buffers_,
                body_ahead_};
    }

    forward_args args_{args_for(request_)};
    std::optional<response_parser> response_;
};

TEST_F(ResponseRelayHeader, HopByHopFieldsGoAndRateLimitFieldsAreAdded) {
    limiter::decision d;
    d.limit = 10;
    d.remaining = 4;
    d.reset_after = std::chrono::milliseconds(1'500);
    args_.reply.limits = {"api", &d, false};
    EXPECT_TRUE(prepare("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: X-Private\r\n"
                        "X-Private: 1\r\nKeep-Alive: timeout=5\r\nRateLimit: \"up\";r=1\r\n\r\n"));
    EXPECT_EQ(count("X-Private"), 0u);
    EXPECT_EQ(count("Keep-Alive"), 0u);
    EXPECT_EQ(count("Connection"), 0u);
    EXPECT_EQ(count("RateLimit"), 0u) << "the upstream's own is replaced";
    EXPECT_EQ(count("Content-Length"), 1u);
    EXPECT_NE(scratch_.lines.find("RateLimit-Policy: \"api\";q=10\r\n"), std::string::npos)
        << scratch_.lines;
    EXPECT_NE(scratch_.lines.find("RateLimit: \"api\";r=4;t=2\r\n"), std::string::npos)
        << scratch_.lines;
    EXPECT_EQ(scratch_.lines.find("Connection:"), std::string::npos) << scratch_.lines;
}

// A body the upstream ends by closing (or chunks) is chunked for an HTTP/1.1 client, which keeps
// its connection; an HTTP/1.0 client knows no chunking, so its body ends when sluice closes.
TEST_F(ResponseRelayHeader, ABodyWithoutLengthIsChunkedFor11AndEndsWithTheConnectionFor10) {
    EXPECT_TRUE(prepare("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"));
    EXPECT_TRUE(response_->head().chunked());
    EXPECT_FALSE(prepare("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", 0));
    EXPECT_FALSE(response_->head().chunked());
    // Closing is HTTP/1.0's default: no Connection field says so.
    EXPECT_EQ(scratch_.lines.find("Connection:"), std::string::npos) << scratch_.lines;
    EXPECT_EQ(response_->head().version, 10u);
}

TEST_F(ResponseRelayHeader, ADrainingWorkerClosesTheClientConnection) {
    EXPECT_FALSE(prepare("HTTP/1.1 204 No Content\r\n\r\n", 1, true));
    EXPECT_NE(scratch_.lines.find("Connection: close\r\n"), std::string::npos) << scratch_.lines;
}

// A response that came before the request's body was all read (an upstream that answered an
// upload early): the client's connection closes after it, since the rest of the body would be
// read as its next request.
TEST_F(ResponseRelayHeader, AnAnswerBeforeTheWholeBodyClosesTheClientConnection) {
    request_parser partial{
        std::piecewise_construct, std::make_tuple(), std::make_tuple(arena_.allocator())};
    error_code ec;
    const std::string_view head = "POST /up HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\n";
    partial.put(net::buffer(head.data(), head.size()), ec);
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_FALSE(partial.is_done());
    auto args = args_for(partial);
    args.reply.version = 11;
    parse("HTTP/1.1 413 Payload Too Large\r\nContent-Length: 2\r\n\r\n");
    EXPECT_FALSE(prepare_response(args, *response_));
    EXPECT_NE(scratch_.lines.find("Connection: close\r\n"), std::string::npos) << scratch_.lines;
}

// A 101 passes only as the answer to a WebSocket upgrade, and only when it switches to WebSocket;
// any other 1xx stays interim.
TEST_F(ResponseRelayHeader, A101IsFinalOnlyForAWebSocketUpgrade) {
    upstream::connection conn(ex_);
    // RFC 6455 1.3's example key, and its accept.
    const std::string_view key = "dGhlIHNhbXBsZSBub25jZQ==";
    const std::string switched = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                 "Connection: Upgrade\r\n"
                                 "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    parse(switched);
    EXPECT_EQ(judge_response_header({}, *response_, conn, false, key), failure::none);
    EXPECT_EQ(judge_response_header({}, *response_, conn, false, {}), failure::upstream)
        << "a 101 nobody asked for";
    parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    EXPECT_EQ(judge_response_header({}, *response_, conn, false, key), failure::upstream)
        << "a 101 without the proof that a WebSocket server read the key";
    parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n");
    EXPECT_EQ(judge_response_header({}, *response_, conn, false, key), failure::upstream)
        << "switched to a protocol nobody asked for";
    parse("HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n");
    EXPECT_EQ(judge_response_header({}, *response_, conn, false, key), failure::interim);
}

// Beast takes any three digits; only 100-599 are status codes (RFC 9110 15). One below 100,
// taken for interim, was relayed as one, and left the client out of step.
TEST_F(ResponseRelayHeader, AStatusOutside100To599IsAnUpstreamFailure) {
    upstream::connection conn(ex_);
    for (const auto& [status, expected] : {std::pair{"000", failure::upstream},
                                           std::pair{"099", failure::upstream},
                                           std::pair{"100", failure::interim},
                                           std::pair{"199", failure::interim},
                                           std::pair{"200", failure::none},
                                           std::pair{"599", failure::none},
                                           std::pair{"600", failure::upstream},
                                           std::pair{"999", failure::upstream}}) {
        parse(std::string("HTTP/1.1 ") + status + " X\r\nContent-Length: 0\r\n\r\n");
        EXPECT_EQ(judge_response_header({}, *response_, conn, false, {}), expected) << status;
    }
}

// RFC 9110 8.6: Content-Length values that are all the same (a list on one line, or several
// lines) are taken as that one value, and a proxy forwards it alone (RFC 9112 6.3), in the first
// field's place. Sluice's scan hands such a head to Beast's parser; a head in pieces goes there
// from its first byte: both end in the same head.
TEST_F(ResponseRelayHeader, RepeatedEqualContentLengthsGoOnAsOneValue) {
    for (const std::string lengths :
         {"Content-Length: 5, 5\r\n",
          "Content-Length: 5\r\nContent-Length: 5\r\n",
          "Content-Length: 5,5 , 5\r\nX-Mid: 1\r\ncontent-length: 5\r\n"}) {
        const auto text =
            "HTTP/1.1 200 OK\r\nX-Before: 1\r\n" + lengths + "X-After: 2\r\n\r\nhello";
        const auto expected_names = lengths.find("X-Mid") != std::string::npos
                                        ? "X-Before\nContent-Length\nX-Mid\nX-After\n"
                                        : "X-Before\nContent-Length\nX-After\n";
        for (const bool whole : {true, false}) {
            if (whole) {
                parse(text);
            } else {
                const auto ec = parse_in_pieces(text, 20);
                EXPECT_TRUE(!ec || ec == bhttp::error::need_buffer) << ec.message();
            }
            ASSERT_EQ(response_->content_length().value_or(0), 5u) << lengths;
            EXPECT_TRUE(prepare_response(args_, *response_));
            EXPECT_EQ(count("Content-Length"), 1u) << lengths << (whole ? "whole" : "in pieces");
            EXPECT_EQ(response_->head().value_of(bhttp::field::content_length), "5") << lengths;
            EXPECT_EQ(names(), expected_names) << lengths;
        }
    }
    // A single plain value is left as it came.
    prepare("HTTP/1.1 200 OK\r\nContent-Length: 0005\r\n\r\nhello");
    EXPECT_EQ(response_->head().value_of(bhttp::field::content_length), "0005");
}

// A 204 has no body, and goes to the client without Content-Length or Transfer-Encoding (RFC
// 9110 8.6, RFC 9112 6.1), as nginx sends it: a client taking either for a body's framing would
// wait for a body. Other bodiless responses (304, a HEAD's) keep Content-Length: it gives the
// size of the representation.
TEST_F(ResponseRelayHeader, A204GoesOnWithoutFramingFields) {
    for (const std::string framing :
         {"Content-Length: 5\r\n", "Transfer-Encoding: chunked\r\n", "Content-Length: 0\r\n"}) {
        parse("HTTP/1.1 204 No Content\r\nX-Before: 1\r\n" + framing + "X-After: 2\r\n\r\n");
        EXPECT_TRUE(prepare_response(args_, *response_));
        EXPECT_EQ(names(), "X-Before\nX-After\n") << framing;
        EXPECT_EQ(scratch_.lines.find("Transfer-Encoding"), std::string::npos) << scratch_.lines;
    }
    parse("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n");
    EXPECT_TRUE(prepare_response(args_, *response_));
    EXPECT_EQ(response_->head().value_of(bhttp::field::content_length), "5");
}

// Values that differ are no length at all: the parser refuses the head, whole or in pieces, and
// the exchange fails (a 502 to the client).
TEST_F(ResponseRelayHeader, DifferingContentLengthsAreRefused) {
    upstream::connection conn(ex_);
    for (const std::string lengths :
         {"Content-Length: 5, 6\r\n", "Content-Length: 5\r\nContent-Length: 6\r\n"}) {
        const auto text = "HTTP/1.1 200 OK\r\n" + lengths + "\r\nhello!";
        response_.emplace(arena_.allocator().resource());
        error_code ec;
        response_->put(net::buffer(text), ec);
        EXPECT_EQ(ec, bhttp::error::multiple_content_length) << lengths;
        EXPECT_EQ(judge_response_header(ec, *response_, conn, false, {}), failure::upstream);
        EXPECT_EQ(parse_in_pieces(text, 20), bhttp::error::multiple_content_length) << lengths;
    }
}

TEST_F(ResponseRelayHeader, ASwitchKeepsTheWebSocketFieldsAndSaysUpgrade) {
    limiter::decision d;
    d.limit = 10;
    d.remaining = 4;
    d.reset_after = std::chrono::milliseconds(1'500);
    args_.reply.limits = {"ws", &d, false};
    parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\n"
          "Connection: Upgrade, X-Private\r\nX-Private: 1\r\n"
          "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n");
    prepare_switch(args_, *response_);
    EXPECT_EQ(count("X-Private"), 0u);
    EXPECT_EQ(count("Upgrade"), 0u) << "replaced by this hop's";
    EXPECT_EQ(count("Connection"), 0u);
    EXPECT_EQ(response_->head().value_of(bhttp::field::sec_websocket_accept),
              "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    EXPECT_NE(scratch_.lines.find("RateLimit: \"ws\";r=4;t=2\r\n"), std::string::npos)
        << scratch_.lines;
    EXPECT_NE(scratch_.lines.find("Connection: Upgrade\r\nUpgrade: websocket\r\n"),
              std::string::npos)
        << scratch_.lines;
}

} // namespace
} // namespace sluice::http::detail
