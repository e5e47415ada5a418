// SPDX-License-Identifier: Apache-2.0
// A request body read ahead into memory (take_body_ahead: server.request-buffer-size, a `json:`
// limit's cost.max-body) on arbitrary bytes: the room made in the buffered_body for the pieces,
// the parse into it, what is kept of it. The input's first byte chooses the size of the pieces
// the rest arrives in (1..256 bytes), its second how much may be read ahead (`max`, 1 to 16 KiB),
// its third the chunk limits (server.max-chunk-header-size, server.max-trailer-size); the rest is
// a request, header and body. Properties, beyond "no crash, no sanitizer report":
// nothing throws; the body never grows past `max`; its gauge counts what it allocated, and
// nothing once freed; whether the header is let in, how the read ahead ends and the bytes it
// read do not depend on how the input was cut into pieces (it found a header over
// server.max-header-size let in when it came whole, and a broken chunk extension refused as 413
// or 400 depending on how it came); and a sized body read whole is the bytes that followed the
// header.
#include "http/buffered_body.hpp"
#include "http/client_body.hpp"
#include "http/message_reader.hpp"
#include "request_input.hpp"

#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace {

using namespace sluice::http::detail;
using namespace sluice::fuzz;
namespace beast = boost::beast;
namespace metrics = sluice::metrics;

void fail(const char* what, std::size_t size) {
    std::fprintf(stderr, "request_body_fuzz: %s (body of %zu bytes)\n", what, size);
    std::abort();
}

/// What one read ahead came to.
struct outcome {
    /// How the header's parse ended; nullopt: the input ended first.
    std::optional<sluice::error_code> header;
    /// nullopt: the input ended before the body did (or before its header).
    std::optional<body_read> read;
    std::string body;
    /// The bytes that followed the header, and the body's declared length (sized bodies).
    std::string after_header;
    std::optional<std::uint64_t> content_length;
};

/// Feeds `input` in pieces of `step` bytes: the header as handle_request takes it, then the body
/// read ahead up to `max`, checking the bounds and the gauge as it goes.
outcome read_ahead(std::string_view input,
                   std::size_t step,
                   std::uint64_t max,
                   const chunk_limits& limits) {
    static boost::asio::io_context ioc;
    sluice::timed_stream client(ioc.get_executor()); // never read: the bytes are buffered
    sluice::config::config cfg;
    cfg.server.max_chunk_header_bytes = limits.line;
    cfg.server.max_trailer_bytes = limits.trailer;
    header_arena arena;
    std::optional<request_parser> parser;
    make_request_parser(parser, arena);
    beast::flat_buffer buffer;

    outcome out;
    while (!(out.header = take_header(buffer, *parser, header_limit))) {
        if (!deliver(buffer, input, step)) {
            return out;
        }
    }
    if (*out.header || parser->is_done()) {
        return out;
    }
    out.after_header.assign(static_cast<const char*>(buffer.data().data()), buffer.size());
    out.after_header.append(input);
    if (const auto length = parser->content_length()) {
        out.content_length = *length;
    }

    metrics::gauge allocated{0};
    buffered_body body(allocated);
    bool expect_continue = false;
    std::optional<std::chrono::steady_clock::time_point> started;
    const body_source src{client, buffer, *parser, cfg, expect_continue, started};
    for (;;) {
        out.read = take_body_ahead(src, body, max);
        if (body.size() > max) {
            fail("the body grew past max", body.size());
        }
        // A body short enough for the string's own bytes allocates nothing.
        const bool on_heap = body.size() > std::string().capacity();
        if (allocated.load() < static_cast<std::int64_t>(on_heap ? body.size() : 0)) {
            fail("the gauge counts less than the body holds", body.size());
        }
        if (out.read || !deliver(buffer, input, step)) {
            break;
        }
    }
    out.body.assign(body.view());
    body.release();
    if (allocated.load() != 0) {
        fail("the gauge kept a freed body", out.body.size());
    }
    return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 3) {
        return 0;
    }
    const std::size_t step = std::size_t{data[0]} + 1;
    const std::uint64_t max = std::uint64_t{data[1]} * 64 + 1;
    const auto limits = sluice::fuzz::chunk_limits_from(data[2]);
    const std::string_view input(reinterpret_cast<const char*>(data) + 3, size - 3);

    const auto cut = read_ahead(input, step, max, limits);
    const auto whole = read_ahead(input, input.size() + 1, max, limits);
    // Whether the header was let in (why one was refused may differ: a bad request line is
    // refused by its first bytes, or by Beast once the header is whole).
    const auto let_in = [](const outcome& o) {
        return o.header && !*o.header;
    };
    if (let_in(cut) != let_in(whole) || cut.read != whole.read || cut.body != whole.body) {
        fail("the outcome depends on how the input was cut", cut.body.size());
    }
    if (whole.read == body_read::done && whole.content_length) {
        const auto expected = std::min<std::uint64_t>(*whole.content_length, max);
        if (whole.body != std::string_view(whole.after_header).substr(0, expected)) {
            fail("a sized body is not the bytes after its header", whole.body.size());
        }
    }
    return 0;
}
