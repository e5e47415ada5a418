// SPDX-License-Identifier: Apache-2.0
#pragma once

// The types of the messages sluice parses and writes, with their per-request header arena.

#include "sluice/http/response_parser.hpp"
#include "sluice/io/net.hpp"

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <memory_resource>
#include <optional>
#include <tuple>
#include <utility>

namespace sluice::http::detail {

namespace bhttp = beast::http;
using std::chrono::milliseconds;

/// The fields of the messages sluice parses live in a per-request arena (`header_arena`): a
/// dozen fields per request would otherwise be a dozen mallocs and frees.
using header_allocator = std::pmr::polymorphic_allocator<char>;
using header_fields = bhttp::basic_fields<header_allocator>;

/**
 * Beast's request parser, but for a chunked body's trailer: its fields are read (and bounded by
 * the chunk limits, message_parse.cpp) and dropped, not added to the request's fields. Trailers
 * are not forwarded, and Beast files a trailer field among the header's (next to one of the same
 * name), where a request whose body ends before its header goes upstream (an empty one, or one
 * read ahead for the limiter) would carry it there past every check made on the header: one
 * Host, the hop-by-hop fields, the forwarding fields.
 */
class request_parser final : public bhttp::request_parser<bhttp::buffer_body, header_allocator> {
    using base = bhttp::request_parser<bhttp::buffer_body, header_allocator>;

public:
    using base::base;

    /// The fields a request header may have: beyond, it gets 431. Each field Beast keeps is a
    /// record of 64 bytes beside its text (measured with Beast 1.81), so a 16 KiB header of 4,000
    /// "a:" lines took 256 KB of the request's arena, 16 times its size, where 256 fields take at
    /// most 16 KB. HAProxy refuses more than 101, Envoy more than 100.
    static constexpr std::size_t max_fields = 256;

    /// Whether the last put parsed a chunk header (put_buffered then checks its line); cleared.
    bool take_chunk_header() noexcept { return std::exchange(chunk_header_, false); }

private:
    void on_chunk_header_impl(std::uint64_t, beast::string_view, error_code& ec) override {
        chunk_header_ = true;
        ec = {};
    }

    void on_field_impl(bhttp::field name,
                       beast::string_view name_string,
                       beast::string_view value,
                       error_code& ec) override {
        if (is_header_done()) {
            return;
        }
        if (++fields_ > max_fields) {
            ec = bhttp::error::header_limit;
            return;
        }
        get().insert(name, name_string, value);
    }

    bool chunk_header_ = false;
    std::size_t fields_ = 0;
};

// response_parser (sluice/http/response_parser.hpp) keeps a response's fields flat, in the same
// arena.

/**
 * The memory one request's headers (its own and its response's) are allocated from: a fixed
 * block that covers ordinary headers, then the heap (blocks growing geometrically). Nothing is
 * freed before the arena goes, with the request. 1 KiB, not 2: a request held by shaping keeps
 * its arena, and bench/memory's held requests (a short header) used a tenth of it.
 */
class header_arena {
public:
    header_arena() noexcept
        : resource_(block_.data(), block_.size()) {}

    header_arena(const header_arena&) = delete;
    header_arena& operator=(const header_arena&) = delete;

    header_allocator allocator() noexcept { return &resource_; }

private:
    alignas(std::max_align_t) std::array<std::byte, 1024> block_;
    std::pmr::monotonic_buffer_resource resource_;
};

/// A request parser whose fields come from `allocator`.
template <typename Parser>
void make_parser(std::optional<Parser>& parser, header_allocator allocator) {
    parser.emplace(std::piecewise_construct, std::make_tuple(), std::make_tuple(allocator));
}

} // namespace sluice::http::detail
