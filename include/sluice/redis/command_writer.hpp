// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
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
 * exactly that many with `arg`, or a long one in pieces with `begin_arg` and `append` (or
 * `space`), then `end_arg`, or a run of them written before with `arguments_only` (`splice`).
 */
class command_writer {
public:
    command_writer(std::string& out, std::size_t argc)
        : out_(out) {
        header('*', argc);
    }

    /// A writer of arguments alone, without the array header: a run of them made once, to be
    /// spliced into commands.
    static command_writer arguments_only(std::string& out) { return command_writer(out); }

    /// Arguments `arguments_only` wrote, as many as they are.
    void splice(std::string_view arguments) { out_.append(arguments); }

    void arg(std::string_view a) {
        // One resize, then plain stores: an append for each of the header's three parts, the
        // text and its CRLF cost some 170 instructions an argument, 2k for a script call's.
        char digits[24];
        const auto end = std::to_chars(digits, digits + sizeof digits, a.size()).ptr;
        const auto n = static_cast<std::size_t>(end - digits);
        char* p = space(1 + n + 2 + a.size() + 2);
        *p++ = '$';
        p = std::copy_n(digits, n, p);
        *p++ = '\r';
        *p++ = '\n';
        p = std::copy_n(a.data(), a.size(), p);
        *p++ = '\r';
        *p = '\n';
    }

    void arg(std::int64_t v) {
        char digits[24];
        const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
        arg(std::string_view(digits, static_cast<std::size_t>(end - digits)));
    }

    /// Starts an argument of `size` bytes, to be written with `append`, then `end_arg`.
    void begin_arg(std::size_t size) { header('$', size); }

    void append(std::string_view bytes) { out_.append(bytes); }

    /// `n` more bytes of the argument begun, for the caller to fill (all of them) at once.
    char* space(std::size_t n) {
        const auto at = out_.size();
        out_.resize(at + n);
        return out_.data() + at;
    }

    void end_arg() { out_.append("\r\n"); }

private:
    explicit command_writer(std::string& out)
        : out_(out) {}

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
