// SPDX-License-Identifier: Apache-2.0
// An upstream response on arbitrary bytes, parsed twice, the bytes arriving in pieces as a socket
// would deliver them: by sluice's response_parser (its own scan of a head that came whole, else
// Beast's parser; a flat response_head, body into a small buffer as buffer_body reads it) and by
// Beast's own response_parser with basic_fields and a dynamic body. Properties, beyond "no crash,
// no sanitizer report": both end with the same error, done or not; a parsed head has the same
// status, version, reason and fields, those of one name in the same order (read after the bytes
// they came from were overwritten: the head must hold copies), and the parsers say the same of
// it (keep-alive, to the end of the stream, chunked, Content-Length); the body comes out the
// same; and set_chunked(true or false) leaves the same fields as Beast's chunked(). Each piece is
// erased once parsed, as a reused read buffer would be. Beast's parser takes any
// Transfer-Encoding; sluice's refuses one other than `chunked` alone, and only that. And Beast's
// reads on past its header limit when a head, or its status line, comes in one put; sluice's
// refuses a head that does not end within the limit, and only that.
#include "sluice/core/text.hpp"
#include "sluice/http/response_parser.hpp"

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/dynamic_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace bhttp = boost::beast::http;
using sluice::error_code;
namespace net = sluice::net;
using sluice::http::response_head;
using sluice::http::response_parser;

using field_list = std::vector<std::pair<std::string, std::string>>;

constexpr std::uint32_t header_limit = 1024;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "response_head_fuzz: %s\n", what);
    std::abort();
}

// Fields as HTTP means them: the order of fields of one name kept, the order between names not
// (RFC 9110 5.3). Beast's fields move a field next to the last of its name; a response_head
// keeps the order they came in.
field_list by_name(field_list fields) {
    const auto lower = [](std::string name) {
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) {
            return static_cast<char>(std::tolower(c));
        });
        return name;
    };
    std::stable_sort(fields.begin(), fields.end(), [&](const auto& a, const auto& b) {
        return lower(a.first) < lower(b.first);
    });
    return fields;
}

// A response_head's fields or Beast's, which read alike.
template <typename Fields>
field_list fields_of(const Fields& fields) {
    field_list out;
    for (const auto& f : fields) {
        out.emplace_back(f.name_string(), f.value());
    }
    return out;
}

// Whether `fields` has no Transfer-Encoding, or one of `chunked` alone (any case): the only
// framing sluice's parser takes of it.
template <typename Fields>
bool chunked_alone_or_none(const Fields& fields) {
    std::size_t count = 0;
    bool chunked = false;
    for (const auto& f : fields) {
        if (f.name() == bhttp::field::transfer_encoding) {
            ++count;
            chunked = sluice::iequals(f.value(), "chunked");
        }
    }
    return count == 0 || (count == 1 && chunked);
}

// What one parser made of the input.
struct outcome {
    error_code error; // the first error other than need_more and need_buffer
    bool done = false;
    std::string body;
};

// Gives `parser` the input in pieces, the first of `first` bytes and the others of `step`, each
// erased once put (as a reused read buffer's bytes are), then the end of the stream;
// `before_put` readies the body's buffer and `after_put` collects what went into it.
template <typename Parser, typename Before, typename After>
outcome run(Parser& parser,
            std::string_view input,
            std::size_t first,
            std::size_t step,
            Before before_put,
            After after_put) {
    outcome out;
    std::string pending;
    std::size_t offset = 0;
    while (!parser.is_done()) {
        const bool more_input = offset < input.size();
        if (more_input) {
            const auto n = std::min(offset == 0 ? first : step, input.size() - offset);
            pending.append(input.substr(offset, n));
            offset += n;
        }
        error_code ec;
        std::size_t used = 0;
        if (!pending.empty()) { // Beast takes no empty buffer (a reader never offers one)
            std::string copy = pending;
            before_put();
            used = parser.put(net::buffer(copy), ec);
            after_put(out.body);
            std::fill(copy.begin(), copy.end(), '\x7f');
            pending.erase(0, used);
        }
        if (ec == bhttp::error::need_buffer || (!ec && used > 0)) {
            continue; // progress: more room, or the next piece
        }
        if (ec && ec != bhttp::error::need_more) {
            out.error = ec;
            return out;
        }
        if (!more_input) {
            // Nothing more will come: the end of the stream ends a body read to it, and is an
            // error anywhere else.
            parser.put_eof(ec);
            out.error = ec;
            break;
        }
    }
    out.done = parser.is_done();
    return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) {
        return 0;
    }
    // The first byte: the size of the pieces (1..64), and whether the first piece is the whole
    // input (bit 6: a head that came in one read, which sluice's own scan reads); the second:
    // the body buffer's size (1..64), and whether Transfer-Encoding is then set chunked (bit 7)
    // or not.
    const std::size_t step = std::size_t{data[0]} % 64 + 1;
    const std::size_t body_room = std::size_t{data[1]} % 64 + 1;
    const bool chunk_it = (data[1] & 0x80) != 0;
    const std::string_view input(reinterpret_cast<const char*>(data + 2), size - 2);
    const std::size_t first = (data[0] & 0x40) != 0 ? input.size() : step;
    if (input.empty()) {
        return 0; // a stream that ends before a byte: the reader says so, no parser is asked
    }

    // On the heap, as an interim response's head is: a block not given back is a leak.
    response_parser ours(std::pmr::new_delete_resource());
    bhttp::response_parser<bhttp::dynamic_body> beasts;
    ours.header_limit(header_limit);
    beasts.header_limit(header_limit);
    // As the relay reads: no body limit. (Beast's dynamic_body reserves nothing for a
    // Content-Length, as its string_body would.)
    ours.body_limit(boost::none);
    beasts.body_limit(boost::none);

    std::array<char, 64> room{};
    const auto mine = run(
        ours,
        input,
        first,
        step,
        [&] {
            ours.body().data = room.data();
            ours.body().size = body_room;
        },
        [&](std::string& body) { body.append(room.data(), body_room - ours.body().size); });
    const auto theirs = run(
        beasts, input, first, step, [] {}, [](std::string&) {});

    if (mine.error == bhttp::error::bad_transfer_encoding && beasts.is_header_done() &&
        !chunked_alone_or_none(ours.head())) {
        // sluice's own refusal (response_parser.hpp), once the head is in: of a head Beast took
        // whole, whose Transfer-Encoding is other than one `chunked`. Beast may refuse
        // something later (a Transfer-Encoding in the trailer, say): the parsers stopped at
        // different places, and nothing else compares. A head Beast refused itself, or a
        // refusal of `chunked` alone, goes on to the comparison below.
        return 0;
    }
    if (mine.error == bhttp::error::header_limit && theirs.error != mine.error &&
        input.substr(0, header_limit).find("\r\n\r\n") == std::string_view::npos) {
        // sluice's own limit, exact however the head came (response_parser.cpp): Beast lets in
        // more than its limit when the head, or its status line, comes in one put.
        return 0;
    }
    if (mine.error == bhttp::error::header_limit && theirs.error != mine.error &&
        ours.head().full()) {
        // sluice's own cap on the fields (response_head::max_fields, trailers included), which
        // Beast has not.
        return 0;
    }
    if (mine.error != theirs.error || mine.done != theirs.done) {
        std::fprintf(stderr,
                     "ours: %s, %s; Beast's: %s, %s\n",
                     mine.error.message().c_str(),
                     mine.done ? "done" : "not done",
                     theirs.error.message().c_str(),
                     theirs.done ? "done" : "not done");
        fail("the two parsers end differently");
    }
    if (ours.is_header_done() != beasts.is_header_done()) {
        fail("one parser has the head, the other not");
    }
    if (!ours.is_header_done()) {
        return 0;
    }
    if (ours.keep_alive() != beasts.keep_alive() || ours.need_eof() != beasts.need_eof() ||
        ours.chunked() != beasts.chunked() || ours.content_length() != beasts.content_length()) {
        fail("the parsers say different things of the head");
    }
    const auto& head = ours.head();
    auto& message = beasts.get();
    if (head.status != message.result_int() || head.version != message.version() ||
        head.reason() != std::string_view(message.reason())) {
        fail("the status lines differ");
    }
    // Trailer fields, when the body is chunked and came whole, are among both.
    if (by_name(fields_of(head)) != by_name(fields_of(message.base()))) {
        fail("the fields differ");
    }
    if (!mine.done) {
        return 0;
    }
    if (mine.body != boost::beast::buffers_to_string(message.body().data())) {
        fail("the bodies differ");
    }
    // The Transfer-Encoding edit the relay makes.
    ours.head().set_chunked(chunk_it);
    message.chunked(chunk_it);
    if (by_name(fields_of(ours.head())) != by_name(fields_of(message.base())) ||
        ours.head().chunked() != message.chunked()) {
        fail("set_chunked differs from Beast's chunked()");
    }
    return 0;
}
