// SPDX-License-Identifier: Apache-2.0
// The relay's flat response head and its parser: the same head, fields and body as Beast's own
// parser and fields give, and the Transfer-Encoding edits exactly as Beast's fields make them.
#include "sluice/http/response_head.hpp"

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/parser.hpp>
#include <gtest/gtest.h>

#include <array>
#include <memory_resource>
#include <string>
#include <utility>
#include <vector>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

using field_list = std::vector<std::pair<std::string, std::string>>;

// A response_head's fields or Beast's, which read alike.
template <typename Fields>
field_list fields_of(const Fields& fields) {
    field_list out;
    for (const auto& f : fields) {
        out.emplace_back(f.name_string(), f.value());
    }
    return out;
}

TEST(ResponseParser, HoldsTheHeadAsBeastsParserDoesAndKeepsItPastTheBytes) {
    std::string text =
        "HTTP/1.1 201 Created Here\r\nServer: up\r\nX-Long: " + std::string(600, 'v') +
        "\r\nset-cookie: a=1\r\nSet-Cookie: b=2\r\n" + "Content-Length: 0\r\n\r\n";
    response_parser ours(std::pmr::new_delete_resource());
    bhttp::response_parser<bhttp::empty_body> beasts;
    error_code ec;
    EXPECT_EQ(ours.put(net::buffer(text), ec), text.size());
    EXPECT_FALSE(ec) << ec.message();
    beasts.put(net::buffer(text), ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(ours.is_done());
    // The parsed bytes go (a read buffer is reused): the head must not point into them.
    std::fill(text.begin(), text.end(), '#');

    const auto& head = ours.head();
    EXPECT_EQ(head.status, 201u);
    EXPECT_EQ(head.version, 11u);
    EXPECT_EQ(head.reason(), "Created Here");
    EXPECT_EQ(fields_of(head), fields_of(beasts.get().base()));
    EXPECT_EQ(head.find("SET-COOKIE")->value(), "a=1") << "the first of its name, any case";
    EXPECT_EQ(head.value_of(bhttp::field::server), "up");
    EXPECT_EQ(head.value_of(bhttp::field::content_type), "");
    EXPECT_EQ(head.find("X-Absent"), nullptr);
}

TEST(ResponseParser, AnEmptyReasonIsWrittenAsBeastWritesIt) {
    for (const auto& [line, reason] :
         std::vector<std::pair<std::string, std::string>>{{"HTTP/1.0 404 \r\n", "Not Found"},
                                                          {"HTTP/1.1 299 \r\n", "<unknown-status>"},
                                                          {"HTTP/1.1 200 Fine\r\n", "Fine"}}) {
        const std::string text = line + "Content-Length: 0\r\n\r\n";
        response_parser ours(std::pmr::new_delete_resource());
        bhttp::response_parser<bhttp::empty_body> beasts;
        error_code ec;
        ours.put(net::buffer(text), ec);
        beasts.put(net::buffer(text), ec);
        EXPECT_EQ(ours.head().reason(), reason) << line;
        EXPECT_EQ(ours.head().reason(), beasts.get().reason()) << line;
    }
}

// As Beast's buffer_body: bytes go where body() points; a full buffer stops the put with
// need_buffer, and the rest comes with the next buffer. Trailer fields join the head's.
TEST(ResponseParser, ReadsTheBodyIntoTheCallersBufferAndTrailersIntoTheHead) {
    const std::string text = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "5\r\nhello\r\n6\r\n world\r\n0\r\nX-Usage: 7\r\n\r\n";
    response_parser parser(std::pmr::new_delete_resource());
    parser.eager(true);
    error_code ec;
    std::size_t used = parser.put(net::buffer(text), ec);
    EXPECT_EQ(ec, bhttp::error::need_buffer) << "no buffer given yet";
    std::string body;
    std::array<char, 4> block{};
    while (!parser.is_done()) {
        parser.body().data = block.data();
        parser.body().size = block.size();
        used += parser.put(net::buffer(text.data() + used, text.size() - used), ec);
        ASSERT_TRUE(!ec || ec == bhttp::error::need_buffer) << ec.message();
        body.append(block.data(), block.size() - parser.body().size);
    }
    EXPECT_EQ(body, "hello world");
    EXPECT_EQ(used, text.size());
    EXPECT_TRUE(parser.head().chunked());
    ASSERT_NE(parser.head().find("x-usage"), nullptr);
    EXPECT_EQ(parser.head().find("x-usage")->value(), "7");
}

// set_chunked against Beast's message::chunked on the same fields: the same fields, in the same
// order, come out.
TEST(ResponseHead, SetChunkedEditsTransferEncodingAsBeastDoes) {
    const std::vector<field_list> cases = {
        {},
        {{"Content-Type", "text/plain"}},
        {{"Transfer-Encoding", "chunked"}, {"Server", "up"}},
        {{"Transfer-Encoding", "gzip"}, {"Server", "up"}},
        {{"Transfer-Encoding", "gzip, chunked"}},
        {{"Transfer-Encoding", "chunked, gzip"}},
        {{"Transfer-Encoding", "gzip"}, {"X", "1"}, {"Transfer-Encoding", "br"}},
        {{"Transfer-Encoding", "Chunked"}},
        {{"Transfer-Encoding", "gzip,  deflate ,chunked"}},
        {{"Content-Length", "5"}, {"Server", "up"}},
        {{"Transfer-Encoding", ""}},
    };
    for (const auto& fields : cases) {
        for (const bool chunked : {true, false}) {
            response_head head(std::pmr::new_delete_resource());
            bhttp::response<bhttp::empty_body> beasts;
            for (const auto& [name, value] : fields) {
                head.add(bhttp::string_to_field(name), name, value);
                beasts.insert(name, value);
            }
            EXPECT_EQ(head.chunked(), beasts.chunked()) << fields_of(beasts).size();
            head.set_chunked(chunked);
            beasts.chunked(chunked);
            EXPECT_EQ(fields_of(head), fields_of(beasts))
                << (chunked ? "chunked(true) on " : "chunked(false) on ")
                << (fields.empty() ? std::string("no fields") : fields.front().second);
            EXPECT_EQ(head.chunked(), beasts.chunked());
        }
    }
}

TEST(ResponseHead, RemoveIfKeepsTheOthersInOrder) {
    response_head head(std::pmr::new_delete_resource());
    head.add(bhttp::field::server, "Server", "up");
    head.add(bhttp::field::connection, "Connection", "close");
    head.add(bhttp::field::unknown, "X-A", "1");
    head.add(bhttp::field::keep_alive, "Keep-Alive", "timeout=5");
    head.add(bhttp::field::unknown, "X-B", std::string(1000, 'b')); // a block of its own
    head.remove_if([](const head_field& f) {
        return f.name() == bhttp::field::connection || f.name() == bhttp::field::keep_alive;
    });
    EXPECT_EQ(fields_of(head),
              (field_list{{"Server", "up"}, {"X-A", "1"}, {"X-B", std::string(1000, 'b')}}));
}

} // namespace
} // namespace sluice::http
