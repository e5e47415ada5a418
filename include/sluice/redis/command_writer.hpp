// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::redis {

/**
 * Writes one command in RESP, the array of bulk strings Redis reads, for
 * `client::async_formatted`. hiredis's own formatting goes through a printf-style routine per
 * argument, a visible cost for the store's script calls (dozens of arguments, one call per batch
 * of requests); this is a plain append.
 *
 * The constructor writes the array header, so the number of arguments is fixed up front; write
 * exactly that many with `arg`, or a long one in pieces with `begin_arg` and `append`.
 */
class command_writer {
public:
    command_writer(std::string& out, std::size_t argc)
        : out_(out) {
        header('*', argc);
    }

    void arg(std::string_view a) {
        begin_arg(a.size());
        out_.append(a);
        out_.append("\r\n");
    }

    void arg(std::int64_t v) {
        char digits[24];
        const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
        arg(std::string_view(digits, static_cast<std::size_t>(end - digits)));
    }

    /// Starts an argument of `size` bytes, to be written with `append`, then `end_arg`.
    void begin_arg(std::size_t size) { header('$', size); }

    void append(std::string_view bytes) { out_.append(bytes); }

    void end_arg() { out_.append("\r\n"); }

private:
    void header(char kind, std::size_t n) {
        char digits[24];
        const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
        out_.push_back(kind);
        out_.append(digits, static_cast<std::size_t>(end - digits));
        out_.append("\r\n");
    }

    std::string& out_;
};

} // namespace sluice::redis
