// SPDX-License-Identifier: Apache-2.0
// Reading and checking a request header: the defences that run before any rate-limit work.
#include "http/session_detail.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>
#include <iterator>
#include <string_view>

namespace sluice::http::detail {
namespace {

std::size_t count_fields(const bhttp::fields& fields, bhttp::field name) {
    const auto range = fields.equal_range(name);
    return static_cast<std::size_t>(std::distance(range.first, range.second));
}

// Where the header in `data` ends (after its blank line), searching from `from`; npos if the
// blank line has not arrived. A bare-LF blank line counts too, so that Beast, not a timeout,
// decides about it.
std::size_t find_header_end(std::string_view data, std::size_t from) {
    from = from >= 3 ? from - 3 : 0;
    const auto crlf = data.find("\r\n\r\n", from);
    const auto lf = data.find("\n\n", from);
    if (crlf == std::string_view::npos && lf == std::string_view::npos) {
        return std::string_view::npos;
    }
    return crlf < lf ? crlf + 4 : lf + 2;
}

// Whether a header uses obsolete line folding (a line starting with space or tab). Beast would
// unfold it; RFC 9112 5.2 lets a server refuse it instead, which we do: a field that spans lines
// is a classic way to make two parsers disagree.
bool has_obs_fold(std::string_view header) {
    for (auto pos = header.find('\n'); pos != std::string_view::npos && pos + 1 < header.size();
         pos = header.find('\n', pos + 1)) {
        if (header[pos + 1] == ' ' || header[pos + 1] == '\t') {
            return true;
        }
    }
    return false;
}

// Reads until the buffer holds a complete request header, within `limit` bytes, and refuses
// obsolete line folding.
awaitable<error_code>
read_header_block(timed_stream& stream, beast::flat_buffer& buffer, std::uint64_t limit) {
    std::size_t scanned = 0;
    for (;;) {
        const std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
        const auto end = find_header_end(data, scanned);
        if (end != std::string_view::npos) {
            if (has_obs_fold(data.substr(0, end - 2))) {
                co_return bhttp::error::bad_value;
            }
            co_return error_code{};
        }
        if (data.size() > limit) {
            co_return bhttp::error::header_limit;
        }
        scanned = data.size();
        const auto room = std::clamp<std::uint64_t>(limit + 4 - data.size(), 512, 16 * 1024);
        auto [ec, n] = co_await stream.async_read_some(buffer.prepare(room));
        buffer.commit(n);
        if (ec == net::error::eof) {
            co_return bhttp::error::partial_message;
        }
        if (ec) {
            co_return ec;
        }
    }
}

} // namespace

// The answer to a request whose header could not be read; nullopt: close without one.
std::optional<bhttp::status> header_error_status(const error_code& ec, bool got_some) {
    if (ec == bhttp::error::header_limit) {
        return bhttp::status::request_header_fields_too_large;
    }
    if (ec == bhttp::error::body_limit) {
        return bhttp::status::payload_too_large;
    }
    if (ec == beast::error::timeout) {
        // A slow header (slow loris) gets a 408; an idle keep-alive connection just closes.
        return got_some ? std::optional{bhttp::status::request_timeout} : std::nullopt;
    }
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
        ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) {
        return std::nullopt; // the client left, or a socket error
    }
    return bhttp::status::bad_request;
}

// Checks the parser leaves to us; anything here closes the connection after the answer.
std::optional<bhttp::status> check_request(const request_parser& parser,
                                           const config::config& cfg) {
    const auto& req = parser.get();
    if (req.target().size() > cfg.server.max_uri_bytes) {
        return bhttp::status::uri_too_long;
    }
    // RFC 9112 3.2: exactly one Host in HTTP/1.1, at most one before.
    const auto hosts = count_fields(req, bhttp::field::host);
    if (hosts > 1 || (req.version() >= 11 && hosts == 0)) {
        return bhttp::status::bad_request;
    }
    // Beast accepts repeated equal Content-Length values ("5, 5"); the next hop might not agree
    // on what they mean, so refuse them (RFC 9112 6.3 allows either).
    const auto lengths = req.equal_range(bhttp::field::content_length);
    if (count_fields(req, bhttp::field::content_length) > 1 ||
        (lengths.first != lengths.second &&
         std::string_view(lengths.first->value()).find(',') != std::string_view::npos)) {
        return bhttp::status::bad_request;
    }
    // A Transfer-Encoding whose final coding is not chunked leaves the length unknowable, and
    // HTTP/1.0 has none (RFC 9112 6.1).
    if (count_fields(req, bhttp::field::transfer_encoding) > 0 &&
        (!parser.chunked() || req.version() < 11)) {
        return bhttp::status::bad_request;
    }
    const auto expect = req.find(bhttp::field::expect);
    if (expect != req.end() && !beast::iequals(expect->value(), "100-continue")) {
        return bhttp::status::expectation_failed;
    }
    return std::nullopt;
}

awaitable<error_code> read_header(timed_stream& stream,
                                  beast::flat_buffer& buffer,
                                  request_parser& parser,
                                  std::uint64_t limit) {
    auto ec = co_await read_header_block(stream, buffer, limit);
    if (ec) {
        co_return ec;
    }
    // The whole header is in the buffer: parse it here rather than through an asynchronous
    // read, which would complete through the scheduler without reading anything.
    const auto used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == bhttp::error::need_more) {
        // Only if our blank-line scan and Beast disagree; let Beast read and decide.
        auto [read_ec, n] = co_await bhttp::async_read_header(stream, buffer, parser);
        ec = read_ec;
    }
    co_return ec;
}

} // namespace sluice::http::detail
