// SPDX-License-Identifier: Apache-2.0
#pragma once

// A minimal blocking Redis client for tests (RESP2 over one TCP connection to 127.0.0.1): lets
// a test look at what sluice stored (HGETALL, PTTL, TIME) or disturb it (SCRIPT FLUSH) without
// going through the code under test.

#include "support/fd_stream.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::test {

/// One RESP2 reply.
struct resp_value {
    enum class kind {
        nil,
        integer,
        string, // bulk string
        status, // "+OK"
        error,  // "-ERR ...": `text` holds the message
        array,
    };

    kind type = kind::nil;
    long long integer = 0;
    std::string text;
    std::vector<resp_value> elements;

    /// A one-line rendering for assertion messages.
    std::string describe() const;
};

class resp_client {
public:
    /// Connects to 127.0.0.1:port. Throws boost::system::system_error when it cannot.
    explicit resp_client(std::uint16_t port,
                         std::chrono::milliseconds timeout = std::chrono::seconds(5));

    /**
     * Sends one command (arguments are binary-safe) and reads its reply. Throws
     * boost::system::system_error on I/O errors or timeouts, std::runtime_error on a reply that
     * is not RESP2. An error reply is a value (`kind::error`), not an exception.
     */
    resp_value command(const std::vector<std::string>& args);

    /// HGETALL `key` as field/value pairs in reply order; empty when the key does not exist.
    std::vector<std::pair<std::string, std::string>> hgetall(const std::string& key);

    /// Whether `key` exists.
    bool exists(const std::string& key);

    /// Redis TIME in unix milliseconds (fraction dropped).
    std::int64_t time_ms();

private:
    // Reads up to and including the next CRLF; returns the line without it.
    std::string read_line();
    resp_value read_value();

    fd_stream stream_;
    std::string buffer_;
};

/// One command to the server on 127.0.0.1:`port` on a connection of its own; a server that
/// cannot be reached (or answers nothing within 2 s) reads as an error value naming why.
resp_value command_or_error(std::uint16_t port, const std::vector<std::string>& args);

/// The value of `field` in an INFO-style "field:value\r\n" text; empty when absent.
std::string info_field(const std::string& text, const std::string& field);

} // namespace sluice::test
