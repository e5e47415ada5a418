// SPDX-License-Identifier: Apache-2.0
#pragma once

// The parser of an upstream response (src/http/response_parser.cpp): a head that came whole and
// plain is read by sluice's own scan, anything else by Beast's parser, with the same results.

#include "sluice/http/response_head.hpp"

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/optional/optional.hpp>

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <optional>
#include <utility>

namespace sluice::http {

namespace detail {

/// Beast's HTTP/1 parser writing into a response_parser's head and body buffer.
class beast_response_parser final : public beast::http::basic_parser<false> {
public:
    beast_response_parser(response_head& head, beast::http::buffer_body::value_type& body) noexcept
        : head_(head)
        , body_(body) {}

    /// While set, a head put is parsed for what it says of the body and the connection only:
    /// the scan, which read the real head, primes the parser for a chunked body with one.
    void priming(bool priming) noexcept { priming_ = priming; }

    /// Whether the last put parsed a chunk header (put_buffered then checks its line); cleared.
    bool take_chunk_header() noexcept { return std::exchange(chunk_header_, false); }

private:
    void on_request_impl(
        beast::http::verb, beast::string_view, beast::string_view, int, error_code& ec) override;
    void
    on_response_impl(int code, beast::string_view reason, int version, error_code& ec) override;
    void on_field_impl(beast::http::field name,
                       beast::string_view name_string,
                       beast::string_view value,
                       error_code& ec) override;
    void on_header_impl(error_code& ec) override;
    void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                           error_code& ec) override;
    std::size_t on_body_impl(beast::string_view body, error_code& ec) override;
    void on_chunk_header_impl(std::uint64_t size,
                              beast::string_view extensions,
                              error_code& ec) override;
    std::size_t
    on_chunk_body_impl(std::uint64_t remain, beast::string_view body, error_code& ec) override;
    void on_finish_impl(error_code& ec) override;

    response_head& head_;
    beast::http::buffer_body::value_type& body_;
    bool chunk_header_ = false;
    bool priming_ = false;
};

} // namespace detail

/**
 * An upstream response's parser, with the interface and the results of Beast's basic_parser
 * (same errors, same bytes consumed, same head), filling a `response_head` and reading the body
 * as Beast's buffer_body does: `body()` says where the next bytes go (data, size), and a put
 * stops with need_buffer when that is full.
 *
 * When the first put holds the whole head within the header limit, and every line of it is
 * plain (no obsolete folding, at most one Content-Length or one `Transfer-Encoding: chunked`, a
 * Connection of one token), sluice's own scan reads it: that is nearly every response, and half
 * Beast's instructions for it. The scan reads a body by its length or to the end of the stream;
 * a chunked one goes to Beast's parser, primed with a head of its own that says what the real
 * one said of the body and the connection. Anything else (a head in pieces, a head Beast might
 * refuse) goes to Beast's parser from the first byte, as if the scan had not looked.
 * fuzz/response_head_fuzz.cpp holds the two to the same results.
 *
 * One refusal is sluice's own, in both paths: a head whose Transfer-Encoding is anything but one
 * `chunked` (which Beast 1.81 takes, even beside a Content-Length) ends with
 * bad_transfer_encoding once it is in, as nginx refuses it from an upstream: no client could be
 * sure to read the body as sluice framed it.
 */
class response_parser {
public:
    /// The head's strings and records come from `memory`.
    explicit response_parser(std::pmr::memory_resource* memory) noexcept
        : head_(memory) {}

    response_parser(const response_parser&) = delete;
    response_parser& operator=(const response_parser&) = delete;

    response_head& head() noexcept { return head_; }

    const response_head& head() const noexcept { return head_; }

    beast::http::buffer_body::value_type& body() noexcept { return body_; }

    // Settings, as Beast's (before the first put).
    void header_limit(std::uint32_t limit) noexcept { header_limit_ = limit; }

    void body_limit(boost::optional<std::uint64_t> limit) noexcept { body_limit_ = limit; }

    /// A response to HEAD: no body, whatever the head says.
    void skip(bool skip) noexcept { skip_ = skip; }

    /// Parse the body in the same put as the head, and as much of it as fits.
    void eager(bool eager) noexcept { eager_ = eager; }

    /// Parses what it can of `buffer`; returns the bytes consumed. Errors as Beast's put.
    std::size_t put(net::const_buffer buffer, error_code& ec);

    /// The end of the stream: the end of a body read to it, partial_message in any other state.
    void put_eof(error_code& ec);

    bool got_some() const noexcept { return beast_ ? beast_->got_some() : state_ != state::start; }

    bool is_header_done() const noexcept {
        return beast_ ? beast_->is_header_done() : state_ > state::start;
    }

    bool is_done() const noexcept { return beast_ ? beast_->is_done() : state_ == state::complete; }

    // What the head said (valid once it is done).
    bool chunked() const noexcept { return beast_ ? beast_->chunked() : false; }

    bool keep_alive() const noexcept;

    bool need_eof() const noexcept { return beast_ ? beast_->need_eof() : flags_.need_eof; }

    /// The Content-Length the head gave, if any.
    boost::optional<std::uint64_t> content_length() const noexcept;

    /// As beast_response_parser's: whether the last put parsed a chunk header; cleared.
    bool take_chunk_header() noexcept { return beast_ && beast_->take_chunk_header(); }

private:
    enum class state : unsigned char { start, body, body_to_eof, complete };

    /// What the scan learnt from the head's fields (Beast's do_field).
    struct head_flags {
        bool connection_close = false;
        bool connection_keep_alive = false;
        bool has_length = false;
        std::uint64_t length = 0;
        bool chunked = false;
        bool need_eof = false; // the body ends with the stream
    };

    /// The scan of a head that came whole: the bytes it took, or 0 when Beast must parse it.
    std::size_t scan_head(const char* data, std::size_t size, error_code& ec);
    /// Whether the field is one the scan takes as Beast would, noting what it says in `flags_`.
    bool take_field(beast::http::field name, std::string_view value) noexcept;
    /// Beast's finish_header for a response: where the body is, and the body limit.
    void finish_head(error_code& ec) noexcept;
    std::size_t put_body(const char* data, std::size_t size, error_code& ec) noexcept;
    /// Hands the whole message to Beast's parser.
    std::size_t put_to_beast(net::const_buffer buffer, error_code& ec);
    /// A put to Beast's parser, holding a head to the header limit exactly.
    std::size_t put_to_beast_within_limit(net::const_buffer buffer, error_code& ec);
    /// Hands a chunked body to Beast's parser, after a head of its own that says what the
    /// scanned one said (version, Connection); false if Beast did not take it as expected.
    bool prime_beast_for_chunks();

    response_head head_;
    beast::http::buffer_body::value_type body_;
    std::optional<detail::beast_response_parser> beast_;
    boost::optional<std::uint64_t> body_limit_ = 8 * 1024 * 1024; // Beast's for a response
    std::uint64_t remaining_ = 0;                                 // of a body with a length
    std::uint32_t header_limit_ = 8192;                           // Beast's
    std::uint32_t head_taken_ = 0; // of a head Beast has not ended: its status line
    head_flags flags_;
    state state_ = state::start;
    bool skip_ = false;
    bool eager_ = false;
};

} // namespace sluice::http
