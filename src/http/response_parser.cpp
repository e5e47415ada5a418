// SPDX-License-Identifier: Apache-2.0
// The upstream response's parser: sluice's scan of a plain head that came whole, Beast's parser
// for every other, and for the chunks of a body after a scanned head. The scan takes only what it
// knows Beast takes the same way; at the first thing it does not, it forgets what it read and
// Beast parses from the first byte, so the two can differ in nothing but speed
// (fuzz/response_head_fuzz.cpp holds them to it).
#include "sluice/http/response_parser.hpp"

#include "sluice/core/text.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

namespace sluice::http {
namespace {

namespace bhttp = beast::http;

bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}

// What ends a reason phrase or a field value in Beast's parse_token_to_eol: a control byte other
// than HTAB, or DEL. Obsolete text (0x80 and up) is part of the value.
bool ends_text(char ch) noexcept {
    const auto c = static_cast<unsigned char>(ch);
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

// The first byte in [p, last) that ends a line's text, or `last`. Eight bytes at a time: a byte
// loop over a head's values was an eighth of the scan's instructions.
const char* find_text_end(const char* p, const char* last) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        constexpr std::uint64_t ones = 0x0101010101010101;
        constexpr std::uint64_t highs = 0x8080808080808080;
        while (last - p >= 8) {
            std::uint64_t word;
            std::memcpy(&word, p, sizeof word);
            // The high bit of each byte below 0x20, or equal to 0x7f (zero once xored with it),
            // exact up to the first such byte (borrows run upwards only); a byte of 0x80 and up
            // never counts (the & ~x).
            const std::uint64_t del = word ^ (ones * 0x7f);
            const std::uint64_t found =
                (((word - ones * 0x20) & ~word) | ((del - ones) & ~del)) & highs;
            if (found == 0) {
                p += 8;
                continue;
            }
            p += std::countr_zero(found) / 8;
            if (*p != '\t') {
                return p;
            }
            ++p; // a tab is text
        }
    }
    while (p != last && !ends_text(*p)) {
        ++p;
    }
    return p;
}

// Whether `value` is `lower` in any case. `lower` holds lowercase letters and '-' only, and
// `value` is a line's text (no CR): so a byte, its 0x20 bit set, equals a byte of `lower` only
// if it is that byte or its uppercase.
bool equals_lowercase(std::string_view value, std::string_view lower) noexcept {
    if (value.size() != lower.size()) {
        return false;
    }
    unsigned differ = 0;
    for (std::size_t i = 0; i < value.size(); ++i) {
        differ |=
            static_cast<unsigned char>(value[i] | 0x20) ^ static_cast<unsigned char>(lower[i]);
    }
    return differ == 0;
}

// `value` without the spaces and tabs at its end (Beast's trim_back).
std::string_view trim_back(const char* first, const char* last) noexcept {
    while (last != first && (last[-1] == ' ' || last[-1] == '\t')) {
        --last;
    }
    return {first, static_cast<std::size_t>(last - first)};
}

// Where `body` goes, as Beast's buffer_body reads it: into the caller's buffer, as much as fits;
// need_buffer when not all of it did, or no buffer was given.
std::size_t
read_into(bhttp::buffer_body::value_type& buffer, std::string_view body, error_code& ec) noexcept {
    if (buffer.data == nullptr) {
        ec = bhttp::error::need_buffer;
        return 0;
    }
    const auto n = std::min(body.size(), buffer.size);
    if (n > 0) {
        std::memcpy(buffer.data, body.data(), n);
    }
    buffer.data = static_cast<char*>(buffer.data) + n;
    buffer.size -= n;
    ec = n == body.size() ? error_code{} : error_code(bhttp::error::need_buffer);
    return n;
}

// Whether the head has no Transfer-Encoding, or one field of `chunked` alone: nginx's rule for
// an upstream's response. Beast 1.81 takes any other coding, even with a Content-Length after
// it, and frames the body by that length or reads it to the close; a client that sees the same
// fields may read another body (Transfer-Encoding overrides Content-Length, RFC 9112 6.3), and
// a coding sluice cannot remove cannot be re-framed for it. The scan takes only `chunked` alone
// and hands every other head to Beast: only Beast's heads need this look.
bool relayable_framing(const response_head& head) noexcept {
    bool chunked = false;
    for (const auto& f : head) {
        if (f.name() == bhttp::field::transfer_encoding) {
            if (chunked || !equals_lowercase(f.value(), "chunked")) {
                return false;
            }
            chunked = true;
        }
    }
    return true;
}

} // namespace

// --- sluice's scan -------------------------------------------------------------------------

std::size_t response_parser::put(net::const_buffer buffer, error_code& ec) {
    if (beast_) {
        return beast_->is_header_done() ? beast_->put(buffer, ec)
                                        : put_to_beast_within_limit(buffer, ec);
    }
    const auto* data = static_cast<const char*>(buffer.data());
    const auto size = buffer.size();
    ec = {};
    switch (state_) {
    case state::start: {
        if (size == 0) {
            ec = bhttp::error::need_more;
            return 0;
        }
        const auto used = scan_head(data, size, ec);
        if (used == 0) {
            return put_to_beast(buffer, ec);
        }
        // As Beast: without the eager option a put that ends the head parses no body.
        if (ec || !eager_ || state_ == state::complete || used == size) {
            return used;
        }
        if (beast_) { // chunks
            return used + beast_->put(net::buffer(data + used, size - used), ec);
        }
        return used + put_body(data + used, size - used, ec);
    }
    case state::body:
    case state::body_to_eof:
        return put_body(data, size, ec);
    case state::complete:
        break;
    }
    ec = bhttp::error::stale_parser;
    return 0;
}

// One pass over the head, in one function: the scan is the hot path it was written for
// (Beast's byte-by-byte parse was the largest single cost of a request, docs/benchmarks.md),
// and each field's bytes are looked at once, where they are.
std::size_t response_parser::scan_head(const char* const first, std::size_t size, error_code& ec) {
    // Only a head that ends within the limit: a longer one is Beast's to judge.
    const char* const last = first + std::min<std::size_t>(size, header_limit_);
    const char* p = first;
    // The status line: "HTTP/1.x" with x 0 or 1, SP, three digits, SP, a reason phrase, CRLF.
    if (last - p < 13 || std::memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
        p[8] != ' ' || !is_digit(p[9]) || !is_digit(p[10]) || !is_digit(p[11]) || p[12] != ' ') {
        return 0;
    }
    const unsigned version = p[7] == '1' ? 11 : 10;
    const auto status =
        static_cast<unsigned>((p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0'));
    p += 13;
    const char* eol = find_text_end(p, last);
    if (last - eol < 2 || eol[0] != '\r' || eol[1] != '\n') {
        return 0;
    }
    head_.status = status;
    head_.version = version;
    head_.set_reason_in_place({p, static_cast<std::size_t>(eol - p)});
    p = eol + 2;
    // The fields, up to the blank line.
    for (;;) {
        if (last - p < 2) {
            return 0;
        }
        if (p[0] == '\r') {
            if (p[1] != '\n') {
                return 0;
            }
            p += 2;
            break;
        }
        // The line's end first: CRLF, and the next line's first byte there, and not a space or
        // tab (obsolete line folding is Beast's to join).
        eol = find_text_end(p, last);
        if (last - eol < 3 || eol[0] != '\r' || eol[1] != '\n' || eol[2] == ' ' || eol[2] == '\t') {
            return 0;
        }
        // The name: token bytes up to the colon. The line's end is no token byte, so the loop
        // needs no other bound.
        const char* const name_first = p;
        while (is_tchar(*p)) {
            ++p;
        }
        if (p == name_first || *p != ':') {
            return 0;
        }
        const std::string_view name(name_first, static_cast<std::size_t>(p - name_first));
        ++p;
        while (*p == ' ' || *p == '\t') {
            ++p;
        }
        const char* const value_first = p;
        const auto value = trim_back(value_first, eol);
        const auto known = bhttp::string_to_field({name.data(), name.size()});
        if (!take_field(known, value) || head_.full()) {
            return 0; // Beast's to say (a field beyond max_fields: header_limit)
        }
        head_.add_in_place(known, name, value);
        p = eol + 2;
    }
    if (flags_.chunked) {
        // Beast says chunked() of a message with no body too, and the scan does not: Beast's to
        // say.
        if (skip_ || status / 100 == 1 || status == 204 || status == 304 ||
            !prime_beast_for_chunks()) {
            return 0;
        }
    }
    // One copy of the head, for the reason and the fields to outlive the read buffer's bytes:
    // a copy of each string apart cost twice the instructions.
    head_.keep_read_bytes({first, static_cast<std::size_t>(p - first)});
    if (!flags_.chunked) {
        finish_head(ec);
    }
    return static_cast<std::size_t>(p - first);
}

bool response_parser::take_field(bhttp::field name, std::string_view value) noexcept {
    switch (name) {
    case bhttp::field::connection:
    case bhttp::field::proxy_connection:
        // One token; a list, or an empty value, is Beast's (its list rules).
        if (equals_lowercase(value, "keep-alive")) {
            flags_.connection_keep_alive = true;
        } else if (equals_lowercase(value, "close")) {
            flags_.connection_close = true;
        } else if (value.empty() || !std::all_of(value.begin(), value.end(), is_tchar)) {
            return false;
        }
        return true;
    case bhttp::field::content_length: {
        // One, of at most 18 digits (no overflow to think of), and no Transfer-Encoding; a
        // list, a second one, or a larger number is Beast's.
        if (flags_.has_length || flags_.chunked || value.empty() || value.size() > 18) {
            return false;
        }
        std::uint64_t length = 0;
        for (const char c : value) {
            if (!is_digit(c)) {
                return false;
            }
            length = length * 10 + static_cast<std::uint64_t>(c - '0');
        }
        flags_.has_length = true;
        flags_.length = length;
        return true;
    }
    case bhttp::field::transfer_encoding:
        // "chunked" alone, once, and no Content-Length; other codings are Beast's.
        if (flags_.has_length || flags_.chunked || !equals_lowercase(value, "chunked")) {
            return false;
        }
        flags_.chunked = true;
        return true;
    default:
        return true;
    }
}

// Beast's finish_header for a response (RFC 9112 6.3).
void response_parser::finish_head(error_code& ec) noexcept {
    const auto status = head_.status;
    if (skip_ || status / 100 == 1 || status == 204 || status == 304) {
        state_ = state::complete; // no body, whatever Content-Length says
    } else if (flags_.has_length) {
        if (flags_.length == 0) {
            state_ = state::complete;
        } else {
            state_ = state::body;
            remaining_ = flags_.length;
            if (body_limit_ && flags_.length > *body_limit_) {
                ec = bhttp::error::body_limit;
            }
        }
    } else {
        state_ = state::body_to_eof;
        flags_.need_eof = true;
    }
}

std::size_t response_parser::put_body(const char* data, std::size_t size, error_code& ec) noexcept {
    if (state_ == state::body) {
        const auto n = read_into(
            body_, {data, static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, size))}, ec);
        remaining_ -= n;
        if (!ec && remaining_ == 0) {
            state_ = state::complete;
        }
        return n;
    }
    // To the end of the stream: the body limit counts what was offered, as Beast's does.
    if (body_limit_) {
        if (size > *body_limit_) {
            ec = bhttp::error::body_limit;
            return 0;
        }
        *body_limit_ -= size;
    }
    return read_into(body_, {data, size}, ec);
}

void response_parser::put_eof(error_code& ec) {
    if (beast_) {
        beast_->put_eof(ec);
        return;
    }
    ec = {};
    if (state_ == state::start || (flags_.has_length && state_ != state::complete)) {
        ec = bhttp::error::partial_message;
        return;
    }
    state_ = state::complete;
}

bool response_parser::keep_alive() const noexcept {
    if (beast_) {
        return beast_->keep_alive();
    }
    const bool kept = head_.version >= 11 ? !flags_.connection_close : flags_.connection_keep_alive;
    return kept && !flags_.need_eof;
}

boost::optional<std::uint64_t> response_parser::content_length() const noexcept {
    if (beast_) {
        return beast_->content_length();
    }
    return flags_.has_length ? boost::optional<std::uint64_t>(flags_.length) : boost::none;
}

bool response_parser::prime_beast_for_chunks() {
    // What Beast's parser keeps of a head, and all a chunked body's parse reads of it: the
    // version, Connection's close and keep-alive (keep_alive(), with what trailers add), and
    // Transfer-Encoding. Trailer fields it parses go to the head, as they would have.
    std::array<char, 128> text;
    char* out = text.data();
    const auto append = [&out](std::string_view line) {
        out = std::copy(line.begin(), line.end(), out);
    };
    append(head_.version >= 11 ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.0 200 OK\r\n");
    append("Transfer-Encoding: chunked\r\n");
    // keep_alive() reads only close in HTTP/1.1, only keep-alive in HTTP/1.0.
    if (head_.version >= 11 ? flags_.connection_close : flags_.connection_keep_alive) {
        append(head_.version >= 11 ? "Connection: close\r\n" : "Connection: keep-alive\r\n");
    }
    append("\r\n");
    const auto size = static_cast<std::size_t>(out - text.data());
    beast_.emplace(head_, body_);
    beast_->body_limit(body_limit_);
    beast_->eager(eager_);
    beast_->priming(true);
    error_code ec;
    const auto used = beast_->put(net::buffer(text.data(), size), ec);
    beast_->priming(false);
    if (ec || used != size || !beast_->is_header_done() || !beast_->chunked()) {
        beast_.reset(); // not expected: Beast parses the real head instead
        return false;
    }
    return true;
}

std::size_t response_parser::put_to_beast(net::const_buffer buffer, error_code& ec) {
    head_.clear();
    flags_ = {};
    beast_.emplace(head_, body_);
    beast_->header_limit(header_limit_);
    beast_->body_limit(body_limit_);
    beast_->skip(skip_);
    head_taken_ = 0;
    return put_to_beast_within_limit(buffer, ec);
}

// Beast 1.81 holds a head to its limit loosely when the head comes in one put (the status line
// and the fields each get the whole limit), and when the first piece holds the status line (it
// takes that line, and the fields get the limit again): the same bytes would be let in or refused
// depending on how they came. So Beast is given no more of a head than the limit leaves, and a
// head it has not ended within that is over the limit.
std::size_t response_parser::put_to_beast_within_limit(net::const_buffer buffer, error_code& ec) {
    const std::size_t room = header_limit_ - head_taken_;
    const auto size = buffer.size();
    // A head, first, on its own: what follows it is parsed below, once its length is known.
    beast_->eager(false);
    auto used = room == 0 ? 0 : beast_->put(net::buffer(buffer.data(), std::min(size, room)), ec);
    beast_->eager(eager_);
    if (!beast_->is_header_done()) {
        head_taken_ += static_cast<std::uint32_t>(used);
        if (room == 0 || (ec == bhttp::error::need_more && size >= room)) {
            ec = bhttp::error::header_limit;
        }
        return used;
    }
    if (eager_ && !ec && used < size && !beast_->is_done()) {
        used += beast_->put(buffer + used, ec);
    }
    return used;
}

// --- Beast's parser ------------------------------------------------------------------------

namespace detail {

void beast_response_parser::on_request_impl(
    bhttp::verb, beast::string_view, beast::string_view, int, error_code& ec) {
    ec = {}; // never called: this parser reads responses
}

void beast_response_parser::on_response_impl(int code,
                                             beast::string_view reason,
                                             int version,
                                             error_code& ec) {
    ec = {};
    if (priming_) {
        return;
    }
    head_.status = static_cast<unsigned>(code);
    head_.version = static_cast<unsigned>(version);
    head_.set_reason({reason.data(), reason.size()});
    ec = {};
}

void beast_response_parser::on_field_impl(bhttp::field name,
                                          beast::string_view name_string,
                                          beast::string_view value,
                                          error_code& ec) {
    ec = {};
    if (!priming_) {
        if (head_.full()) {
            ec = bhttp::error::header_limit;
            return;
        }
        head_.add(name, {name_string.data(), name_string.size()}, {value.data(), value.size()});
    }
}

void beast_response_parser::on_header_impl(error_code& ec) {
    // A primed head is the scan's, whose Transfer-Encoding take_field held to `chunked` alone.
    ec = priming_ || relayable_framing(head_) ? error_code{}
                                              : error_code(bhttp::error::bad_transfer_encoding);
}

void beast_response_parser::on_body_init_impl(const boost::optional<std::uint64_t>&,
                                              error_code& ec) {
    ec = {};
}

std::size_t beast_response_parser::on_body_impl(beast::string_view body, error_code& ec) {
    return read_into(body_, {body.data(), body.size()}, ec);
}

void beast_response_parser::on_chunk_header_impl(std::uint64_t,
                                                 beast::string_view,
                                                 error_code& ec) {
    chunk_header_ = true;
    ec = {};
}

std::size_t
beast_response_parser::on_chunk_body_impl(std::uint64_t, beast::string_view body, error_code& ec) {
    return on_body_impl(body, ec);
}

void beast_response_parser::on_finish_impl(error_code& ec) {
    ec = {};
}

} // namespace detail
} // namespace sluice::http
