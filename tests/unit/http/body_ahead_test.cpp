// SPDX-License-Identifier: Apache-2.0
// A request body read ahead from what the client's buffer holds (take_body_ahead, no I/O): the
// memory it zero-fills as the body comes, and the limits it keeps (the read ahead's `max`,
// server.max-body-size).
#include "http/buffered_body.hpp"
#include "http/client_body.hpp"
#include "http/message_reader.hpp"
#include "sluice/http/worker_context.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::http::detail {
namespace {

constexpr std::string_view chunked_header =
    "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";

/// `count` chunks of one byte each (a letter, in turn), then the last chunk.
std::string one_byte_chunks(std::size_t count, std::string& payload) {
    std::string out;
    for (std::size_t i = 0; i < count; ++i) {
        const char c = static_cast<char>('a' + i % 26);
        payload += c;
        out += "1\r\n";
        out += c;
        out += "\r\n";
    }
    return out + "0\r\n\r\n";
}

/// `count` chunks of `size` bytes of `c`, without the last chunk.
std::string chunks_of(std::size_t count, std::size_t size, char c) {
    std::string out;
    for (std::size_t i = 0; i < count; ++i) {
        char line[32];
        const int n = std::snprintf(line, sizeof line, "%zx\r\n", size);
        out.append(line, static_cast<std::size_t>(n)).append(size, c).append("\r\n");
    }
    return out;
}

class BodyAhead : public ::testing::Test {
protected:
    BodyAhead() {
        make_parser(parser_, arena_.allocator());
        parser_->header_limit(8 * 1024);
    }

    /// Parses the request header `header` (all of it in the buffer).
    void take_request_header(std::string_view header) {
        append(header);
        const auto ec = take_header(buffer_, *parser_, 8 * 1024);
        ASSERT_TRUE(ec.has_value());
        ASSERT_FALSE(*ec) << ec->message();
    }

    /// Puts `bytes` in the client buffer, as a read from the socket would.
    void append(std::string_view bytes) {
        std::memcpy(buffer_.prepare(bytes.size()).data(), bytes.data(), bytes.size());
        buffer_.commit(bytes.size());
    }

    std::optional<body_read> take(std::uint64_t max) {
        const body_source src{client_, buffer_, *parser_, cfg_, expect_continue_, started_};
        return take_body_ahead(src, body_, max);
    }

    net::io_context ioc_;
    timed_stream client_{ioc_.get_executor()}; // never read: the bytes are buffered
    config::config cfg_;
    header_arena arena_;
    std::optional<request_parser> parser_;
    beast::flat_buffer buffer_;
    metrics::gauge allocated_{0};
    buffered_body body_{allocated_};
    bool expect_continue_ = false;
    std::optional<std::chrono::steady_clock::time_point> started_;
};

// A hostile client's body of one-byte chunks, each in a read of its own: two parses a byte. The
// room is made only as the body outgrows it (4, 8, 16, 32 KiB: four times for 20,000 bytes),
// not for every parse, which zero-filled 4 to 32 KiB each time, 64 KiB per byte of body.
TEST_F(BodyAhead, OneByteChunksZeroFillOnlyAsTheBodyGrows) {
    take_request_header(chunked_header);
    std::string payload;
    const std::string body = one_byte_chunks(20'000, payload);
    std::size_t grown = 0;
    std::size_t reserved = body_.reserved();
    std::optional<body_read> read;
    for (std::size_t at = 0; at < body.size() && !read; at += 5) {
        append(std::string_view(body).substr(at, 5));
        read = take(1024 * 1024);
        if (body_.reserved() != reserved) {
            EXPECT_GT(body_.reserved(), reserved) << "the room shrank at byte " << body_.size();
            reserved = body_.reserved();
            ++grown;
        }
    }
    ASSERT_EQ(read, body_read::done);
    EXPECT_TRUE(parser_->is_done());
    EXPECT_EQ(body_.view(), payload);
    EXPECT_EQ(grown, 4u);
    // All that was ever zero-filled: the body and what is left of its last step of room.
    EXPECT_LE(body_.reserved(), payload.size() + relay_buffer_size);
}

// The read ahead stops at `max` exactly (cost.max-body), whether the chunks came whole or in
// pieces, the room made before it notwithstanding.
TEST_F(BodyAhead, StopsAtMaxExactlyWholeOrInPieces) {
    const std::string body = chunks_of(3, 10'000, 'q');
    for (const std::size_t piece : {body.size(), std::size_t{7}}) {
        SCOPED_TRACE("pieces of " + std::to_string(piece));
        make_parser(parser_, arena_.allocator());
        body_.release();
        buffer_.clear();
        take_request_header(chunked_header);
        std::optional<body_read> read;
        for (std::size_t at = 0; at < body.size() && !read; at += piece) {
            append(std::string_view(body).substr(at, piece));
            read = take(12'345);
        }
        ASSERT_EQ(read, body_read::done);
        EXPECT_FALSE(parser_->is_done());
        EXPECT_EQ(body_.view(), std::string(12'345, 'q'));
        EXPECT_EQ(body_.room(), 0u);
    }
}

// server.max-body-size (the parser's body limit) refuses the chunk that would pass it, its
// bytes before it read ahead.
TEST_F(BodyAhead, TheBodyLimitRefusesTheChunkPastIt) {
    parser_->body_limit(1'000);
    take_request_header(chunked_header);
    std::string payload;
    append(one_byte_chunks(1'001, payload));
    EXPECT_EQ(take(64 * 1024), body_read::too_large);
    EXPECT_EQ(body_.view(), payload.substr(0, 1'000));
}

// A sized body gets room for what it has left, not a block of 4 KiB.
TEST_F(BodyAhead, ASizedBodyGetsRoomForItsLengthOnly) {
    take_request_header("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 300\r\n\r\n");
    const std::string body(300, 'z');
    for (std::size_t at = 0; at < body.size(); at += 100) {
        append(std::string_view(body).substr(at, 100));
        const auto read = take(64 * 1024);
        EXPECT_EQ(read.has_value(), at + 100 == body.size());
    }
    EXPECT_EQ(body_.view(), body);
    EXPECT_EQ(body_.reserved(), 300u);
}

} // namespace
} // namespace sluice::http::detail
