// SPDX-License-Identifier: Apache-2.0
#include "http/message_writer.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/write.hpp>
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <sstream>
#include <string>

namespace sluice::http::detail {
namespace {

/// A message_writer's output, read back from the other end of a loopback connection.
class MessageWriterTest : public ::testing::Test {
protected:
    MessageWriterTest() {
        tcp::acceptor acceptor(ioc_, tcp::endpoint(net::ip::address_v4::loopback(), 0));
        stream_.socket().connect(acceptor.local_endpoint());
        acceptor.accept(peer_);
    }

    /// Writes through `writer` and expects it done at once (a small message, an empty socket).
    void write(message_writer& writer, std::string_view block, bool last) {
        error_code ec;
        EXPECT_TRUE(writer.write_now(stream_, block, last, ec));
        EXPECT_FALSE(ec) << ec.message();
    }

    /// Everything the peer received so far (what was written, in full).
    std::string received(std::size_t size) {
        std::string out(size, '\0');
        net::read(peer_, net::buffer(out));
        return out;
    }

    /// Beast's own serialization of `header`: what the writer must reproduce.
    template <bool isRequest>
    static std::string beast_header(const bhttp::header<isRequest, header_fields>& header) {
        std::ostringstream out;
        out << header;
        return out.str();
    }

    /// `header` as the relay holds an upstream's: the same status line and fields, in order.
    std::unique_ptr<response_head> head_of(const bhttp::header<false, header_fields>& header) {
        auto head = std::make_unique<response_head>(arena_.allocator().resource());
        head->status = header.result_int();
        head->version = header.version();
        head->set_reason(header.reason());
        for (const auto& f : header) {
            head->add(f.name(), f.name_string(), f.value());
        }
        return head;
    }

    net::io_context ioc_;
    timed_stream stream_{ioc_.get_executor()};
    tcp::socket peer_{ioc_};
    std::string scratch_;
    header_arena arena_;
};

TEST_F(MessageWriterTest, RequestHeaderMatchesBeastsWithExtraLinesBeforeTheBlankLine) {
    bhttp::request<bhttp::empty_body, header_fields> req{
        std::piecewise_construct, std::make_tuple(), std::make_tuple(arena_.allocator())};
    req.method(bhttp::verb::get);
    req.target("/a/b?c=d");
    req.version(11);
    req.insert("Host", "example.com");
    req.insert("X-Custom", "one, two");
    message_writer writer(
        req.base(), body_framing::none, scratch_, "X-Forwarded-For: 10.0.0.1\r\n");
    write(writer, {}, true);

    auto expected = beast_header(req.base());
    expected.insert(expected.size() - 2, "X-Forwarded-For: 10.0.0.1\r\n");
    EXPECT_EQ(received(expected.size()), expected);
}

TEST_F(MessageWriterTest, ResponseHeaderAndRawBodyGoOutTogether) {
    bhttp::response<bhttp::empty_body, header_fields> res{
        std::piecewise_construct, std::make_tuple(), std::make_tuple(arena_.allocator())};
    res.result(bhttp::status::not_found);
    res.version(11);
    res.insert("Content-Length", "5");
    res.insert("Content-Type", "text/plain");
    message_writer writer(*head_of(res.base()), body_framing::raw, scratch_, {});
    write(writer, "hello", true);

    const auto expected = beast_header(res.base()) + "hello";
    EXPECT_EQ(received(expected.size()), expected);
}

TEST_F(MessageWriterTest, KeepsTheUpstreamsReasonPhrase) {
    bhttp::response<bhttp::empty_body, header_fields> res{
        std::piecewise_construct, std::make_tuple(), std::make_tuple(arena_.allocator())};
    res.result(299);
    res.reason("Fine Anyway");
    res.version(10);
    message_writer writer(*head_of(res.base()), body_framing::none, scratch_, {});
    write(writer, {}, true);

    const std::string expected = "HTTP/1.0 299 Fine Anyway\r\n\r\n";
    EXPECT_EQ(received(expected.size()), expected);
}

TEST_F(MessageWriterTest, ChunkedBodyIsRechunkedAndEndsWithTheLastChunk) {
    bhttp::response<bhttp::empty_body, header_fields> res{
        std::piecewise_construct, std::make_tuple(), std::make_tuple(arena_.allocator())};
    res.result(bhttp::status::ok);
    res.version(11);
    res.chunked(true);
    message_writer writer(*head_of(res.base()), body_framing::chunked, scratch_, {});
    write(writer, "hello", false);
    write(writer, std::string(26, 'x'), false);
    write(writer, {}, true);

    const auto expected = beast_header(res.base()) + "5\r\nhello\r\n" + "1a\r\n" +
                          std::string(26, 'x') + "\r\n" + "0\r\n\r\n";
    EXPECT_EQ(received(expected.size()), expected);
}

TEST_F(MessageWriterTest, NoBodyFramingWritesTheHeaderOnlyEvenWhenChunked) {
    // A response to HEAD keeps the headers of the full response, Transfer-Encoding included.
    bhttp::response<bhttp::empty_body, header_fields> res{
        std::piecewise_construct, std::make_tuple(), std::make_tuple(arena_.allocator())};
    res.result(bhttp::status::ok);
    res.version(11);
    res.chunked(true);
    message_writer writer(*head_of(res.base()), body_framing::none, scratch_, {});
    write(writer, {}, true);

    const auto expected = beast_header(res.base());
    EXPECT_EQ(received(expected.size()), expected);
    peer_.non_blocking(true);
    std::array<char, 1> more{};
    error_code ec;
    peer_.read_some(net::buffer(more), ec);
    EXPECT_EQ(ec, net::error::would_block); // no last chunk after the header
}

} // namespace
} // namespace sluice::http::detail
