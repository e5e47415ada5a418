// SPDX-License-Identifier: Apache-2.0
// Checking a request header: the defences that run before any rate-limit work. No coroutine here
// (read_header is in message_reader.cpp), so that the request_head fuzzer can build this file
// with every sanitizer (clang 14 cannot build a coroutine with UBSan).
#include "http/request_checks.hpp"

#include "http/header_block_detail.hpp"
#include "http/message_reader.hpp"
#include "sluice/core/text.hpp"

#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>

namespace sluice::http::detail {
namespace {

/// The fields `check_request` looks at, gathered in one pass: each lookup by name would search
/// the field set again, on every request.
struct checked_fields {
    std::size_t hosts = 0;
    std::size_t lengths = 0;
    std::size_t encodings = 0;
    const header_fields::value_type* first_host = nullptr;
    const header_fields::value_type* first_length = nullptr;
    const header_fields::value_type* first_encoding = nullptr;
    const header_fields::value_type* first_expect = nullptr;
};

checked_fields gather(const header_fields& fields) {
    checked_fields out;
    for (const auto& f : fields) {
        switch (f.name()) {
        case bhttp::field::host:
            out.first_host = out.hosts++ == 0 ? &f : out.first_host;
            break;
        case bhttp::field::content_length:
            out.first_length = out.lengths++ == 0 ? &f : out.first_length;
            break;
        case bhttp::field::transfer_encoding:
            out.first_encoding = out.encodings++ == 0 ? &f : out.first_encoding;
            break;
        case bhttp::field::expect:
            out.first_expect = out.first_expect == nullptr ? &f : out.first_expect;
            break;
        default:
            break;
        }
    }
    return out;
}

// Where the header in `data` ends (after its blank line), searching from `from`; npos if the
// blank line has not arrived. A bare-LF blank line counts too, so that Beast, not a timeout,
// decides about it. It is looked for only before the CRLF one: searched to the end of the data,
// every request of a pipelined run of them (CRLF only, no "\n\n" anywhere) cost a scan of all
// the requests behind it, a memchr per line: quadratic in the run.
std::size_t find_header_end(std::string_view data, std::size_t from) {
    from = from >= 3 ? from - 3 : 0;
    const auto crlf = data.find("\r\n\r\n", from);
    // "\n\n" ending past crlf would start at its '\r' or later: never first.
    const auto lf = data.substr(0, crlf).find("\n\n", from);
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

// A method's bytes, as nginx takes them: capital letters, '_' and '-'. RFC 9110 allows any
// token, but a rule's `methods` and an upstream read one spelling each: `post` matched no rule
// listing POST (its limit escaped) while a framework that upper-cases methods (Werkzeug, say)
// served it as POST. nginx refuses such a request line with 400 too.
constexpr bool is_method_char(char c) noexcept {
    return (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
}

// Where the method at the start of `data` ends (its space, or data.size() while it has not
// come), looking from `from` (the bytes before it passed); nullopt at a byte no method has.
std::optional<std::size_t> method_end_from(std::string_view data, std::size_t from) noexcept {
    auto i = from;
    for (; i < data.size() && data[i] != ' '; ++i) {
        if (!is_method_char(data[i])) {
            return std::nullopt;
        }
    }
    return i;
}

// Whether the request line at the start of `data` (whole up to its first space) starts with a
// method of `is_method_char`s.
bool method_in_capitals(std::string_view data) noexcept {
    const auto end = method_end_from(data, 0);
    return end && *end > 0;
}

// What the start of a header in `data` already tells, before its blank line: bytes that cannot
// begin a request line (a TLS ClientHello starts with 0x16; a method not all capitals) are
// bad_method, and a complete first line without an HTTP version (HTTP/0.9's "GET /") is
// bad_version. Either waits for no blank line, which such a peer never sends: without this it
// would hold the connection until the header timeout. Looks only at the bytes after
// `progress.scanned` (those before held no line end, and their method bytes passed).
std::optional<error_code> check_request_line(std::string_view data, header_progress& progress) {
    if (progress.line_judged) {
        return std::nullopt;
    }
    if (!progress.method_end) {
        const auto end = method_end_from(data, progress.scanned);
        if (!end) {
            return bhttp::error::bad_method;
        }
        if (*end == data.size()) {
            return std::nullopt; // nothing yet, or a method still coming
        }
        if (*end == 0) {
            return bhttp::error::bad_method; // a space first
        }
        progress.method_end = end;
    }
    const auto method_end = *progress.method_end;
    const auto line_end = data.find('\n', std::max(method_end, progress.scanned));
    if (line_end == std::string_view::npos) {
        return std::nullopt;
    }
    auto line = data.substr(0, line_end);
    if (!line.empty() && line.back() == '\r') {
        line.remove_suffix(1);
    }
    // request-line = method SP request-target SP HTTP-version (RFC 9112 3)
    const auto version_start = line.find(' ', method_end + 1);
    if (version_start == std::string_view::npos ||
        line.substr(version_start + 1).rfind("HTTP/", 0) != 0) {
        return bhttp::error::bad_version;
    }
    progress.line_judged = true;
    return std::nullopt;
}

// RFC 3986's unreserved characters: a reg-name's, without its sub-delims and percent-encoding,
// which no host name needs and which let two parsers read one host differently. An IPv4
// address is made of them too. By byte value, one load per byte: every request's Host field is
// checked, and with a chain of range tests per byte the check of "127.0.0.1:port" took 204
// instructions, 137 this way (bench/instructions).
constexpr auto host_char_table = alphanumeric_and("-._~");

bool is_host_char(char c) {
    return host_char_table[static_cast<unsigned char>(c)];
}

// Whether `authority` is uri-host [ ":" port ] (RFC 9110 7.2, RFC 3986 3.2.2), and nothing
// else: a reg-name or IPv4 address of host characters, or an IP literal in brackets (host
// characters and colons: IPv6, IPvFuture), then an optional port of digits only. No user info,
// no characters a Host field could not carry. The rule of an absolute-form target's authority
// and of a Host field alike.
bool is_host_and_port(std::string_view authority) {
    std::size_t host_end = 0;
    if (!authority.empty() && authority.front() == '[') {
        const auto close = authority.find(']');
        if (close == std::string_view::npos || close == 1) {
            return false;
        }
        const auto literal = authority.substr(1, close - 1);
        if (!std::all_of(literal.begin(), literal.end(), [](char c) {
                return c == ':' || is_host_char(c);
            })) {
            return false;
        }
        host_end = close + 1;
    } else {
        // The host runs to the first byte that is no host character: the end, a ':' before
        // the port, or a byte that makes the whole invalid (the port's check sees it).
        while (host_end < authority.size() && is_host_char(authority[host_end])) {
            ++host_end;
        }
        if (host_end == 0) {
            return false;
        }
    }
    const auto port = authority.substr(host_end);
    return port.empty() ||
           (port.front() == ':' &&
            std::all_of(port.begin() + 1, port.end(), [](char c) { return c >= '0' && c <= '9'; }));
}

} // namespace

bool take_empty_lines(beast::flat_buffer& buffer) {
    const std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
    std::size_t empty = 0;
    for (;;) {
        if (data.substr(empty).starts_with("\r\n")) {
            empty += 2;
        } else if (data.substr(empty).starts_with('\n')) {
            empty += 1;
        } else {
            break;
        }
    }
    buffer.consume(empty);
    return buffer.size() == 1 && *static_cast<const char*>(buffer.data().data()) == '\r';
}

std::optional<error_code> check_header_block(const beast::flat_buffer& buffer,
                                             std::uint64_t limit,
                                             header_progress& progress) {
    const std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
    auto& scanned = progress.scanned;
    const auto end = find_header_end(data, scanned);
    if (end != std::string_view::npos) {
        // Over the limit whether it came whole or in pieces (a header that came in pieces is
        // refused as soon as it holds more than the limit without its end): Beast's own limit
        // is looser (it counts the request line and the fields apart) and would let in one
        // that came in one read.
        if (end > limit) {
            return bhttp::error::header_limit;
        }
        scanned = end;
        if (!method_in_capitals(data)) {
            return bhttp::error::bad_method; // Beast takes any token
        }
        return has_obs_fold(data.substr(0, end - 2)) ? error_code(bhttp::error::bad_value)
                                                     : error_code{};
    }
    if (data.size() > limit) {
        return bhttp::error::header_limit;
    }
    if (auto bad = check_request_line(data, progress)) {
        return bad;
    }
    scanned = data.size();
    return std::nullopt;
}

error_code parse_header(beast::flat_buffer& buffer,
                        request_parser& parser,
                        std::size_t size,
                        std::string* copy) {
    const auto before = buffer.size();
    if (copy != nullptr) {
        copy->assign(static_cast<const char*>(buffer.data().data()), std::min(size, before));
    }
    // The chunk limits apply to the body only: any will do for the header.
    const auto ec = put_buffered(buffer, parser, chunk_limits{});
    if (copy != nullptr && (ec || before - buffer.size() != copy->size())) {
        copy->clear();
    }
    return ec;
}

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
    const auto fields = gather(req);
    // RFC 9112 3.2: exactly one Host in HTTP/1.1, at most one before.
    if (fields.hosts > 1 || (req.version() >= 11 && fields.hosts == 0)) {
        return bhttp::status::bad_request;
    }
    // RFC 9110 7.2: a Host is uri-host [ ":" port ]. One with a space, a '/', an '@', a control
    // byte or a list in it could make the upstream, a cache or a log take the request for another
    // host's; nginx refuses it too ("client sent invalid host header"). HTTP/1.0 needs no Host,
    // and may send an empty one.
    if (fields.first_host != nullptr) {
        const std::string_view host = fields.first_host->value();
        if (!is_host_and_port(host) && !(host.empty() && req.version() < 11)) {
            return bhttp::status::bad_request;
        }
    }
    // Beast accepts repeated equal Content-Length values ("5, 5"); the next hop might not agree
    // on what they mean, so refuse them (RFC 9112 6.3 allows either). An upstream's response
    // gets the other choice, its one value passed on (prepare_response): refusing it would cost
    // the client a response the upstream gave, where a client can send its request again.
    if (fields.lengths > 1 ||
        (fields.first_length != nullptr &&
         std::string_view(fields.first_length->value()).find(',') != std::string_view::npos)) {
        return bhttp::status::bad_request;
    }
    // Transfer-Encoding is "chunked" alone, on one line, in HTTP/1.1. A final coding other than
    // chunked leaves the length unknowable, and HTTP/1.0 has none (RFC 9112 6.1). A coding
    // before chunked ("identity, chunked", "gzip, chunked") is refused too, as nginx does:
    // sluice sends the body on as plain chunks, and an upstream that read the list otherwise
    // ("identity": no coding at all) would split the stream where sluice did not.
    if (fields.encodings > 0 &&
        (fields.encodings > 1 || req.version() < 11 ||
         !iequals(trim_blanks(fields.first_encoding->value()), "chunked"))) {
        return bhttp::status::bad_request;
    }
    if (fields.first_expect != nullptr && !iequals(fields.first_expect->value(), "100-continue")) {
        return bhttp::status::expectation_failed;
    }
    return std::nullopt;
}

std::optional<std::size_t> take_underscored_fields(header_fields& fields,
                                                   config::underscore_headers policy) {
    if (policy == config::underscore_headers::allow) {
        return 0;
    }
    std::size_t taken = 0;
    for (auto it = fields.begin(); it != fields.end();) {
        // No field Beast knows by name has an underscore: only the others need looking at.
        if (it->name() != bhttp::field::unknown ||
            std::string_view(it->name_string()).find('_') == std::string_view::npos) {
            ++it;
            continue;
        }
        if (policy == config::underscore_headers::reject) {
            return std::nullopt;
        }
        it = fields.erase(it);
        ++taken;
    }
    return taken;
}

std::optional<absolute_target> split_absolute_form(std::string_view target) {
    std::size_t scheme = 0;
    if (istarts_with(target, "http://")) {
        scheme = 7;
    } else if (istarts_with(target, "https://")) {
        scheme = 8;
    } else {
        return std::nullopt;
    }
    auto rest = target.substr(scheme);
    const auto authority_end = std::min(rest.find_first_of("/?#"), rest.size());
    absolute_target out;
    out.authority = rest.substr(0, authority_end);
    if (!is_host_and_port(out.authority)) {
        return std::nullopt;
    }
    rest.remove_prefix(authority_end);
    // RFC 9112 3.2.1: an empty path is sent as "/".
    // Appended, not "/" + std::string(rest): GCC 12 misreads that operator+ as an overlapping
    // memcpy (-Wrestrict) in a release build.
    if (rest.empty() || rest.front() != '/') {
        out.origin_form.reserve(rest.size() + 1);
        out.origin_form.push_back('/');
    }
    out.origin_form.append(rest);
    return out;
}

bool rewrite_absolute_form(bhttp::request_header<header_fields>& req) {
    const auto target = std::string_view(req.target());
    if (target.empty() || target.front() == '/' || target == "*") {
        return true; // origin-form (or asterisk-form, which the path check refuses)
    }
    auto split = split_absolute_form(target);
    // Beast keeps a field value's length in 16 bits and throws beyond 65,533 bytes: an authority
    // that long (server.max-uri-length raised past 64 KiB) is refused as any bad target, since
    // nothing a peer sends may escape as an exception.
    constexpr std::size_t longest_field_value = std::numeric_limits<std::uint16_t>::max() - 2;
    if (!split || split->authority.size() > longest_field_value) {
        return false;
    }
    // Copied before the target changes: `authority` points into its storage.
    const std::string host(split->authority);
    req.target(split->origin_form);
    req.set(bhttp::field::host, host);
    return true;
}

std::optional<error_code> take_header(beast::flat_buffer& buffer,
                                      request_parser& parser,
                                      std::uint64_t limit,
                                      std::string* copy) {
    if (take_empty_lines(buffer)) {
        return std::nullopt;
    }
    header_progress progress;
    auto ec = check_header_block(buffer, limit, progress);
    if (ec && !*ec) {
        ec = parse_header(buffer, parser, progress.scanned, copy);
    }
    if (ec && *ec == bhttp::error::need_more) {
        return std::nullopt;
    }
    return ec;
}

} // namespace sluice::http::detail
