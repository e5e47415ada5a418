// SPDX-License-Identifier: Apache-2.0
// The relay's flat response head and its parser: the same head, fields and body as Beast's own
// parser and fields give, and the Transfer-Encoding edits exactly as Beast's fields make them.
#include "sluice/http/response_parser.hpp"

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/optional/optional_io.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
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

// Heads that come whole, as nearly all do: those the parser's own scan reads and those it leaves
// to Beast's (folding, a Transfer-Encoding, a list, a second length, bytes Beast refuses) end
// with the same error, the same bytes consumed, the same head, and say the same of the body and
// the connection as Beast's parser on the same bytes; a body that came with the head follows.
TEST(ResponseParser, AWholeHeadEndsAsInBeastsParser) {
    const std::vector<std::string> heads = {
        "HTTP/1.1 200 OK\r\nServer: up\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n",
        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.0 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.0 200 OK\r\nProxy-Connection: Keep-Alive\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Tabs:\t a\tb \t\r\nX-Empty:\r\nX-Text: caf\xc3\xa9\r\n\r\n",
        "HTTP/1.1 299 \r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\n\r\n",
        "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: Chunked\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX Bad: a\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Bare: lf\nX-Next: 1\r\n\r\n",
        "HTTP/1.1 200 OK\r\n\rX\r\n\r\n",
        "HTTP/1.2 200 OK\r\n\r\n",
        "HTTP/1.1 20x OK\r\n\r\n",
        "HTTP/1.1 200\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", // not all there
    };
    for (const auto& head_text : heads) {
        for (const bool eager : {false, true}) {
            const std::string text = head_text + "hello";
            response_parser ours(std::pmr::new_delete_resource());
            bhttp::response_parser<bhttp::buffer_body> beasts;
            ours.eager(eager);
            beasts.eager(eager);
            std::array<char, 8> our_body{};
            std::array<char, 8> beasts_body{};
            ours.body().data = our_body.data();
            ours.body().size = our_body.size();
            beasts.get().body().data = beasts_body.data();
            beasts.get().body().size = beasts_body.size();
            error_code our_ec;
            error_code beasts_ec;
            const auto our_used = ours.put(net::buffer(text), our_ec);
            const auto beasts_used = beasts.put(net::buffer(text), beasts_ec);
            const auto where = head_text + (eager ? " (eager)" : "");
            EXPECT_EQ(our_ec, beasts_ec) << where;
            EXPECT_EQ(our_used, beasts_used) << where;
            ASSERT_EQ(ours.is_header_done(), beasts.is_header_done()) << where;
            EXPECT_EQ(ours.is_done(), beasts.is_done()) << where;
            EXPECT_EQ(ours.got_some(), beasts.got_some()) << where;
            EXPECT_EQ(
                std::string(our_body.data(), our_body.size() - ours.body().size),
                std::string(beasts_body.data(), beasts_body.size() - beasts.get().body().size))
                << where;
            if (!ours.is_header_done()) {
                continue;
            }
            const auto& message = beasts.get();
            EXPECT_EQ(ours.head().status, message.result_int()) << where;
            EXPECT_EQ(ours.head().version, message.version()) << where;
            EXPECT_EQ(ours.head().reason(), message.reason()) << where;
            EXPECT_EQ(fields_of(ours.head()), fields_of(message.base())) << where;
            EXPECT_EQ(ours.keep_alive(), beasts.keep_alive()) << where;
            EXPECT_EQ(ours.need_eof(), beasts.need_eof()) << where;
            EXPECT_EQ(ours.chunked(), beasts.chunked()) << where;
            EXPECT_EQ(ours.content_length(), beasts.content_length()) << where;
            // The end of the stream ends both the same way.
            if (!ours.is_done()) {
                ours.put_eof(our_ec);
                beasts.put_eof(beasts_ec);
                EXPECT_EQ(our_ec, beasts_ec) << where;
                EXPECT_EQ(ours.is_done(), beasts.is_done()) << where;
            }
        }
    }
}

// Where the two differ on purpose: a Transfer-Encoding other than one `chunked` (any case) is
// refused once the head is in, as nginx refuses it from an upstream, where Beast 1.81 takes it
// and frames the body by a Content-Length or the close, as a client reading the same fields
// would not (RFC 9112 6.3).
TEST(ResponseParser, RefusesATransferCodingOtherThanChunkedAlone) {
    for (const std::string head_text : {
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n",
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n",
             "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nTransfer-Encoding: gzip\r\n\r\n",
             "HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\n",
         }) {
        response_parser parser(std::pmr::new_delete_resource());
        error_code ec;
        parser.put(net::buffer(head_text + "5\r\nhello\r\n0\r\n\r\n"), ec);
        EXPECT_EQ(ec, bhttp::error::bad_transfer_encoding) << head_text;
    }
    // `chunked` alone, in any case, and in a head the scan leaves to Beast (folded) too.
    for (const std::string head_text : {
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n",
             "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nTransfer-Encoding: Chunked\r\n\r\n",
         }) {
        response_parser parser(std::pmr::new_delete_resource());
        std::array<char, 8> body{};
        parser.body().data = body.data();
        parser.body().size = body.size();
        parser.eager(true);
        error_code ec;
        parser.put(net::buffer(head_text + "5\r\nhello\r\n0\r\n\r\n"), ec);
        EXPECT_FALSE(ec) << head_text << ": " << ec.message();
        EXPECT_TRUE(parser.is_done()) << head_text;
        EXPECT_TRUE(parser.chunked()) << head_text;
    }
}

// A chunked body after a scanned head: Beast's parser, primed with a head that says what the
// real one said, reads the chunks; trailers join the head, and one that closes the connection
// is heard, as in Beast's parser given the whole message.
TEST(ResponseParser, AChunkedBodyAfterAScannedHeadEndsAsInBeastsParser) {
    for (const std::string head_text :
         {"HTTP/1.1 200 OK\r\nServer: up\r\nTransfer-Encoding: chunked\r\n\r\n",
          "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
          "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"}) {
        for (const std::string trailer : {"", "X-Usage: 7\r\n", "Connection: close\r\n"}) {
            const std::string text =
                head_text + "5\r\nhello\r\n6;x=1\r\n world\r\n0\r\n" + trailer + "\r\n";
            response_parser ours(std::pmr::new_delete_resource());
            bhttp::response_parser<bhttp::string_body> beasts;
            error_code ec;
            std::size_t used = ours.put(net::buffer(text), ec);
            ASSERT_FALSE(ec) << ec.message();
            ASSERT_TRUE(ours.is_header_done());
            EXPECT_TRUE(ours.chunked());
            std::string body;
            std::array<char, 4> block{};
            while (!ours.is_done() && !ec) {
                ours.body().data = block.data();
                ours.body().size = block.size();
                used += ours.put(net::buffer(text.data() + used, text.size() - used), ec);
                if (ec == bhttp::error::need_buffer) {
                    ec = {};
                }
                body.append(block.data(), block.size() - ours.body().size);
            }
            ASSERT_FALSE(ec) << ec.message();
            beasts.eager(true);
            EXPECT_EQ(beasts.put(net::buffer(text), ec), text.size());
            ASSERT_FALSE(ec) << ec.message();
            const auto where = head_text + trailer;
            EXPECT_EQ(used, text.size()) << where;
            EXPECT_EQ(body, beasts.get().body()) << where;
            // In any order: Beast's fields put a trailer beside an earlier field of its name.
            auto our_fields = fields_of(ours.head());
            auto beasts_fields = fields_of(beasts.get().base());
            std::sort(our_fields.begin(), our_fields.end());
            std::sort(beasts_fields.begin(), beasts_fields.end());
            EXPECT_EQ(our_fields, beasts_fields) << where;
            EXPECT_EQ(ours.head().version, beasts.get().version()) << where;
            EXPECT_EQ(ours.keep_alive(), beasts.keep_alive()) << where;
            EXPECT_EQ(ours.need_eof(), beasts.need_eof()) << where;
        }
    }
}

// A head longer than the limit is refused, and one within it let in, however it came: whole (the
// scan's, or Beast's when the scan leaves it: a folded line), in pieces, or with its status line
// whole in the first piece. Beast 1.81 alone would let in a head of 248 bytes under a limit of 232
// when it came whole (the status line and the fields each get the whole limit).
TEST(ResponseParser, AHeadOverTheLimitIsRefusedHoweverItCame) {
    constexpr std::uint32_t limit = 232;
    const auto head_of = [](std::size_t size, bool folded) {
        const std::string first = folded ? "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nX-Long: "
                                         : "HTTP/1.1 200 OK\r\nX-Long: ";
        const std::string last = "\r\nContent-Length: 0\r\n\r\n";
        return first + std::string(size - first.size() - last.size(), 'v') + last;
    };
    for (const bool folded : {false, true}) {
        for (const std::size_t size : {limit - 1, limit, limit + 1, limit + 16, 2 * limit}) {
            const auto text = head_of(size, folded);
            ASSERT_EQ(text.size(), size);
            const auto expected =
                size > limit ? error_code(bhttp::error::header_limit) : error_code{};
            // Pieces of `step` bytes after a first of `first`, each put with what is left of the
            // last.
            for (const auto& [first, step] :
                 {std::pair<std::size_t, std::size_t>{size, size}, {7, 7}, {20, 7}, {20, 64}}) {
                response_parser ours(std::pmr::new_delete_resource());
                ours.header_limit(limit);
                std::string pending;
                error_code ec;
                for (std::size_t at = 0; at < text.size() && !ours.is_header_done();) {
                    const auto n = std::min(at == 0 ? first : step, text.size() - at);
                    pending += text.substr(at, n);
                    at += n;
                    pending.erase(0, ours.put(net::buffer(pending), ec));
                    if (ec && ec != bhttp::error::need_more) {
                        break;
                    }
                }
                const auto where = std::to_string(size) + " bytes" + (folded ? ", folded" : "") +
                                   ", first piece " + std::to_string(first) + ", then " +
                                   std::to_string(step);
                EXPECT_EQ(ec, expected) << where;
                EXPECT_EQ(ours.is_header_done(), !expected) << where;
            }
        }
    }
}

// An upstream head with obsolete line folding goes to Beast's parser, which joins a folded value
// with spaces (RFC 9112 5.2 lets a proxy do that or answer 502) in a buffer of 4 KiB: a folded
// value longer than that is refused as a header too large (header_limit, so 502), whatever the
// header limit; an unfolded one of any length within the limit is not.
TEST(ResponseParser, AFoldedValueIsJoinedWithin4KiBAndRefusedPastIt) {
    const auto parse = [](const std::string& value_tail, bool folded) {
        const std::string text = "HTTP/1.1 200 OK\r\nX-Fold: a" +
                                 std::string(folded ? "\r\n " : " ") + value_tail +
                                 "\r\nContent-Length: 0\r\n\r\n";
        response_parser parser(std::pmr::new_delete_resource());
        parser.header_limit(64 * 1024);
        error_code ec;
        parser.put(net::buffer(text), ec);
        const auto* field = parser.head().find("x-fold");
        return std::pair{ec, field != nullptr ? std::string(field->value()) : std::string()};
    };
    const auto [joined_ec, joined] = parse(std::string(4000, 'b'), true);
    EXPECT_EQ(joined_ec, error_code{});
    EXPECT_EQ(joined, "a " + std::string(4000, 'b'));
    EXPECT_EQ(parse(std::string(5000, 'b'), true).first, error_code(bhttp::error::header_limit));
    const auto [plain_ec, plain] = parse(std::string(50'000, 'b'), false);
    EXPECT_EQ(plain_ec, error_code{});
    EXPECT_EQ(plain.size(), 50'002u);
}

// A head of more than max_fields fields is refused as a header too large (502), whether the
// scan or Beast's parser reads it (trailers, Beast's to read, count with the head's fields): the
// 16,000 fields of a 64 KiB head would hold some 1.3 MB of records (computed).
TEST(ResponseParser, AHeadOfMoreThanMaxFieldsIsRefused) {
    const auto parse = [](std::size_t fields, bool folded) {
        std::string text = "HTTP/1.1 200 OK\r\n";
        if (folded) {
            text += "X-Fold: a\r\n b\r\n"; // Beast's parser reads this head
            --fields;
        }
        for (std::size_t i = 0; i + 1 < fields; ++i) {
            text += "a:\r\n";
        }
        text += "Content-Length: 0\r\n\r\n";
        response_parser parser(std::pmr::new_delete_resource());
        parser.header_limit(64 * 1024);
        error_code ec;
        parser.put(net::buffer(text), ec);
        return ec;
    };
    const auto max = response_head::max_fields;
    for (const bool folded : {false, true}) {
        EXPECT_EQ(parse(max, folded), error_code{}) << folded;
        EXPECT_EQ(parse(max + 1, folded), error_code(bhttp::error::header_limit)) << folded;
        EXPECT_EQ(parse(16'000, folded), error_code(bhttp::error::header_limit)) << folded;
    }
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
