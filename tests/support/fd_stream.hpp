// SPDX-License-Identifier: Apache-2.0
#pragma once

// A blocking TCP socket with a timeout on every operation, usable as a Beast SyncReadStream and
// SyncWriteStream. Asio's own synchronous sockets cannot time out (they poll forever after
// EAGAIN), and a test that hangs is worse than one that fails, so tests talk through this.

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::test {

using error_code = boost::system::error_code;

/// A connected TCP socket owned by fd; closed on destruction.
class fd_stream {
public:
    fd_stream() = default;

    /**
     * Takes ownership of `fd`. If `wake_fd` is not -1 (an eventfd or pipe owned by someone else),
     * any blocking operation fails with `operation_aborted` as soon as it becomes readable: this
     * is how a server stops its connection threads.
     */
    explicit fd_stream(int fd, int wake_fd = -1) noexcept;

    fd_stream(fd_stream&& other) noexcept;
    fd_stream& operator=(fd_stream&& other) noexcept;
    fd_stream(const fd_stream&) = delete;
    fd_stream& operator=(const fd_stream&) = delete;
    ~fd_stream();

    /// Connects to 127.0.0.1:port (TCP_NODELAY on). Throws boost::system::system_error.
    static fd_stream connect_loopback(std::uint16_t port);

    /// How long any single read or write may wait for the socket (default 30 s).
    void timeout(std::chrono::milliseconds value) noexcept { timeout_ = value; }

    std::chrono::milliseconds timeout() const noexcept { return timeout_; }

    int native_handle() const noexcept { return fd_; }

    bool is_open() const noexcept { return fd_ >= 0; }

    /// Half-closes the sending side (FIN), keeping the receiving side open.
    void shutdown_send() noexcept;

    void close() noexcept;

    /// Closes with a reset (RST) rather than a FIN, as a client killed mid-request or one with
    /// SO_LINGER 0 does.
    void reset() noexcept;

    /// Reads into the first non-empty buffer. EOF is reported as `net::error::eof`, a timeout
    /// as `timed_out`.
    template <class MutableBufferSequence>
    std::size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
        for (auto it = boost::asio::buffer_sequence_begin(buffers);
             it != boost::asio::buffer_sequence_end(buffers);
             ++it) {
            const boost::asio::mutable_buffer buffer = *it;
            if (buffer.size() != 0) {
                return read_raw(buffer.data(), buffer.size(), ec);
            }
        }
        ec = {};
        return 0;
    }

    template <class MutableBufferSequence>
    std::size_t read_some(const MutableBufferSequence& buffers) {
        error_code ec;
        const std::size_t n = read_some(buffers, ec);
        if (ec) {
            throw boost::system::system_error(ec, "read");
        }
        return n;
    }

    /// Writes from the first non-empty buffer.
    template <class ConstBufferSequence>
    std::size_t write_some(const ConstBufferSequence& buffers, error_code& ec) {
        for (auto it = boost::asio::buffer_sequence_begin(buffers);
             it != boost::asio::buffer_sequence_end(buffers);
             ++it) {
            const boost::asio::const_buffer buffer = *it;
            if (buffer.size() != 0) {
                return write_raw(buffer.data(), buffer.size(), ec);
            }
        }
        ec = {};
        return 0;
    }

    template <class ConstBufferSequence>
    std::size_t write_some(const ConstBufferSequence& buffers) {
        error_code ec;
        const std::size_t n = write_some(buffers, ec);
        if (ec) {
            throw boost::system::system_error(ec, "write");
        }
        return n;
    }

    /// Writes all of `bytes`; the timeout applies to each partial write.
    void write_all(std::string_view bytes, error_code& ec);

    /// As above; throws boost::system::system_error.
    void write_all(std::string_view bytes);

    /**
     * Reads and discards until the peer closes (true) or the timeout passes (false). A reset
     * counts as closed. Discarded bytes are appended to `*discarded` when given.
     */
    bool wait_closed(std::chrono::milliseconds timeout, std::string* discarded = nullptr);

    /// Waits until the socket is readable (data or EOF) without reading; false on timeout or
    /// wake, with `ec` set.
    bool wait_readable(error_code& ec);

private:
    std::size_t read_raw(void* data, std::size_t size, error_code& ec);
    std::size_t write_raw(const void* data, std::size_t size, error_code& ec);
    // Waits until `events` are ready on fd_; false with `ec` set on timeout, wake or error.
    bool wait_ready(short events, std::chrono::milliseconds timeout, error_code& ec);

    int fd_ = -1;
    int wake_fd_ = -1;
    std::chrono::milliseconds timeout_{30'000};
};

} // namespace sluice::test
