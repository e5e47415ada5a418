// SPDX-License-Identifier: Apache-2.0
#pragma once

// An upstream response's head as the relay keeps it (src/http/response_head.cpp); the parser
// that fills it is in response_parser.hpp.

#include "sluice/io/net.hpp"

#include <boost/beast/http/field.hpp>

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <string_view>
#include <vector>

namespace sluice::http {

/// One field of a response head, read as Beast's fields' elements are. The views point into
/// the memory the head was given.
class head_field {
public:
    head_field(beast::http::field name,
               std::string_view name_string,
               std::string_view value) noexcept
        : name_(name)
        , name_string_(name_string)
        , value_(value) {}

    /// Beast's enumerator; field::unknown for a name it does not know.
    beast::http::field name() const noexcept { return name_; }

    std::string_view name_string() const noexcept { return name_string_; }

    std::string_view value() const noexcept { return value_; }

private:
    beast::http::field name_;
    std::string_view name_string_;
    std::string_view value_;
};

/**
 * The status line and the fields of a response, in order, as flat records whose strings are
 * copied into blocks of the head's own. Beast's basic_fields keeps each field in an allocation
 * of its own and in a tree by name, which the relay never searches by name more than once or
 * twice; its edits (hop-by-hop fields out, Transfer-Encoding fitted) cost less on a list too.
 * With bench/run's upstream (five fields) that is 21.1k user-space instructions per request
 * down to 20.2k on the memory store (`bench/run --case instructions`).
 */
class response_head {
public:
    explicit response_head(std::pmr::memory_resource* memory) noexcept
        : memory_(memory)
        , fields_(memory) {}

    /// Gives the blocks of text back (a no-op on a monotonic arena; an interim response's head
    /// lives on the heap).
    ~response_head();

    // A copy would append into the same block of text as its original, and a moved-from head
    // would give its blocks back twice.
    response_head(const response_head&) = delete;
    response_head& operator=(const response_head&) = delete;

    /// The fields a head (trailers included) may have: beyond, the response is refused as a
    /// header too large (502). Each field is a 40-byte record in a vector that grows by doubling
    /// in the request's arena, which keeps every outgrown copy: a 64 KiB head of 16,000 "a:"
    /// lines would hold 640 KB of records and as much again of copies (computed, not measured)
    /// for as long as its response is relayed. HAProxy refuses a message of
    /// more than 101 fields, Envoy of more than 100; 256 leaves room for any real response.
    static constexpr std::size_t max_fields = 256;

    /// Whether the head has `max_fields` fields: another is refused.
    bool full() const noexcept { return fields_.size() >= max_fields; }

    unsigned status = 0;
    unsigned version = 11; // 10 or 11

    /// The reason phrase as the upstream sent it, copied into the head's memory.
    void set_reason(std::string_view reason) { reason_ = keep(reason); }

    /// The reason phrase, or the standard one of `status` when the upstream sent none
    /// ("<unknown-status>" for a code without one): what Beast's header::reason() gives, so that
    /// a head is written as before.
    std::string_view reason() const noexcept;

    /// The fields, in order.
    auto begin() const noexcept { return fields_.begin(); }

    auto end() const noexcept { return fields_.end(); }

    /// Appends a field, its name and value copied into the head's memory.
    void add(beast::http::field name, std::string_view name_string, std::string_view value);

    // A head read where it lies (response_parser's scan): the reason and the fields point into
    // the bytes read until `keep_read_bytes` copies those once, rather than each string apart.
    void set_reason_in_place(std::string_view reason) noexcept { reason_ = reason; }

    void
    add_in_place(beast::http::field name, std::string_view name_string, std::string_view value);

    /// Copies `bytes` into the head's memory and points the reason and every field that pointed
    /// into them at the copy.
    void keep_read_bytes(std::string_view bytes);

    /// The first field called `name` (ignoring case), or null.
    const head_field* find(std::string_view name) const noexcept;
    const head_field* find(beast::http::field name) const noexcept;

    /// The value of the first `name` field, empty when there is none.
    std::string_view value_of(beast::http::field name) const noexcept;

    /// Forgets the status line and the fields (their text stays in the head's blocks until it
    /// goes): what a parser that hands over to another does with what it had read.
    void clear() noexcept;

    /// Removes every field for which `remove(field)` is true, keeping the others' order.
    template <typename Predicate>
    void remove_if(Predicate remove) {
        std::erase_if(fields_, remove);
    }

    /// Whether the first Transfer-Encoding field's list ends with "chunked" (Beast's
    /// header::chunked()): what the head says of the body it is written with.
    bool chunked() const noexcept;

    /**
     * Says in Transfer-Encoding that the body is chunked (`true`) or not (`false`), exactly as
     * Beast's message::chunked(bool) does: "chunked" appended to the first Transfer-Encoding
     * field's list unless it ends with it, or taken off its end; every Transfer-Encoding field
     * is then replaced by one at the end of the head (none when the list is empty), and every
     * Content-Length field goes.
     */
    void set_chunked(bool chunked);

    /**
     * Leaves one Content-Length field, of value `length`, in the first one's place, when the
     * head has several, or a list in one: the parser took them as `length`, which it does only
     * when they all say it (RFC 9110 8.6). A head with one plain value is left as it came.
     */
    void set_single_content_length(std::uint64_t length);

private:
    std::string_view keep(std::string_view text);

    /// The start of each block of text: the blocks form a list, newest first.
    struct text_block {
        text_block* previous;
        std::size_t size;
    };

    /// The size of the blocks a head's strings are copied into: a usual head's in one.
    static constexpr std::size_t text_block_size = 256;

    std::pmr::memory_resource* memory_;
    text_block* blocks_ = nullptr;
    /// Where the next string goes, and how much of its block is left.
    char* next_ = nullptr;
    std::size_t room_ = 0;
    std::string_view reason_;
    std::pmr::vector<head_field> fields_;
};

} // namespace sluice::http
