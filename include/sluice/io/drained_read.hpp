// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reads that tell Asio's reactor when a socket is empty, and a wait for readability that makes no
// system call to start.
//
// Asio's epoll registration is edge-triggered. Per descriptor it keeps one flag per direction,
// "an event came since the socket was last seen empty" (`try_speculative_`): an event sets it,
// and an operation that reports "done and exhausted" clears it. When the flag is clear, a read
// started is queued for the next event without a try, which cannot find anything. Asio's own
// recv reports exhaustion only at the end of the stream, so the flag stays set and every read
// starts with a recv, which fails with EAGAIN when the peer has not sent yet; its wait for
// readability (`async_wait`), which tries nothing, re-arms the descriptor with an EPOLL_CTL_MOD
// instead. Either way one system call per wait: bench/run counted 4.7 to 5.4 per request.
//
// Two buffer types mark the operations this changes (the specialisations below of Asio 1.81's
// recv operation, the only code that knows those internals besides untried_read.hpp's):
// - `drained_buffer`: a read that the kernel says left nothing behind it emptied the socket, and
//   says so. The read is a recvmsg on a socket with TCP_INQ (`enable_drained_reads`): with the
//   bytes the kernel returns how many are left in order, and a non-zero count when nothing is
//   left but the end of the stream. A short read alone would not do: the end of the stream can
//   wait behind it, its edge taken by the reactor with the bytes' (nginx learns of it from
//   EPOLLRDHUP, which Asio does not register), and a close-delimited response would then end
//   only at its timeout (`Proxy.ACloseDelimitedResponseEndsWhenTheUpstreamCloses`). Whatever
//   comes after the recvmsg raises a new event, which sets the flag again. Without the count (no
//   TCP_INQ on the socket, a kernel before 4.18) a read is Asio's.
//   What the count leaves out is a reset: bytes followed at once by a RST (a client killed, or
//   closing with SO_LINGER 0 or unread bytes) come in one event, and the read that takes the
//   bytes is told nothing is left (this machine's kernel, 6.18). No event follows, so a read or
//   a wait started after it ends only at its deadline. Where that would matter, a look
//   (`timed_stream::readable_now`, a recv with MSG_PEEK, which reports the reset) and a read
//   made at once (`timed_stream::read_now`, which never asks the reactor) find it: a held
//   request's watch (request_wait.cpp) uses both, so that the request of a client that reset is
//   never forwarded (`ShapingTest.HeldRequestSentWithAResetIsNeverForwarded`,
//   `ConcurrencyTest.AClientThatResetsWithItsRequestGivesUpItsPlace`). Elsewhere a deadline ends
//   the wait: a head's rest at header-timeout, a body's at body-timeout or upstream.timeout.
// - `readiness_probe`: the wait. It reads nothing. Started while the flag is clear, it is queued
//   without a system call and completes at the next event. Started while the flag is set (an
//   event came since the socket was last seen empty: a new connection, or bytes that came while
//   a read was under way, whose event the reactor took after the read), it looks with a recv of
//   a byte with MSG_PEEK, and waits for the next event if there is nothing. On an event it
//   completes without a look, unless it is a `verified` probe (a parked connection or a held
//   request, where a wake with nothing to read would cost a coroutine): an event can still find
//   nothing when a read that took its bytes ran before the reactor took it, and the read that
//   follows then waits as any read does.
//
// Only for the Boost version whose internals this was written against (Debian 12's 1.81) and the
// epoll reactor; elsewhere `drained_reads` is false and timed_stream reads and waits as Asio does.

#include "sluice/io/net.hpp"

#include <boost/asio/detail/reactive_socket_recv_op.hpp>

#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

namespace sluice::detail {

/// One buffer for a read that reports the socket empty when the kernel says it left nothing
/// behind it (see the top of this file).
struct drained_buffer {
    net::mutable_buffer buffer;

    const net::mutable_buffer* begin() const noexcept { return &buffer; }

    const net::mutable_buffer* end() const noexcept { return &buffer + 1; }
};

/// The buffer of a wait for readability that reads nothing (see the top of this file). It must
/// not be empty, or Asio completes the read at once without the reactor; a look peeks into it.
struct readiness_probe {
    net::mutable_buffer buffer;
    /// True while the wait is being started: the reactor's try then is a look.
    const bool* starting;
    /// Every try is a look, on an event too.
    bool verified;

    const net::mutable_buffer* begin() const noexcept { return &buffer; }

    const net::mutable_buffer* end() const noexcept { return &buffer + 1; }
};

/// The buffer of a check whether an event came since a read last emptied the socket
/// (`timed_stream::event_since_emptied`): the reactor tries an operation as it starts only
/// then, and this one's try reads nothing and records that it was made. It must not be empty
/// (see `readiness_probe`).
struct event_check {
    net::mutable_buffer buffer;
    /// Set when the reactor tried the check.
    bool* tried;

    const net::mutable_buffer* begin() const noexcept { return &buffer; }

    const net::mutable_buffer* end() const noexcept { return &buffer + 1; }
};

} // namespace sluice::detail

#if BOOST_VERSION / 100 == 1081 && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT) &&                 \
    defined(BOOST_ASIO_HAS_EPOLL)
#define SLUICE_DRAINED_READS 1

namespace sluice::detail {

/// One recv of `size` bytes into `data` that also says what is left to read behind them, from
/// the kernel's TCP_INQ message: `left` becomes that count (1 when only the end of the stream
/// is), or -1 when the socket sends none (no TCP_INQ). Returns recvmsg's result (errno set on
/// -1); retries on EINTR.
inline ::ssize_t recv_counting_left(int fd, void* data, std::size_t size, int flags, int& left) {
    ::iovec iov{data, size};
    alignas(::cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    ::msghdr message{};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ::ssize_t n = 0;
    do {
        n = ::recvmsg(fd, &message, flags);
    } while (n < 0 && errno == EINTR);
    left = -1;
    for (auto* c = CMSG_FIRSTHDR(&message); n > 0 && c != nullptr; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level == SOL_TCP && c->cmsg_type == TCP_CM_INQ &&
            c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            std::memcpy(&left, CMSG_DATA(c), sizeof(left));
        }
    }
    return n;
}

/// One recv into `buffer` for a reactor operation, as Asio's own but reporting the socket
/// emptied (`done_and_exhausted`) when the kernel says nothing is left behind the bytes: sets
/// `ec` and `bytes`; `not_done` when there is nothing yet.
inline boost::asio::detail::reactor_op::status recv_reporting_drained(
    int fd, net::mutable_buffer buffer, int flags, error_code& ec, std::size_t& bytes) {
    using status = boost::asio::detail::reactor_op::status;
    int left = -1;
    const auto n = recv_counting_left(fd, buffer.data(), buffer.size(), flags, left);
    bytes = 0;
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return status::not_done;
        }
        ec = error_code(errno, boost::asio::error::get_system_category());
        return status::done;
    }
    ec = error_code();
    bytes = static_cast<std::size_t>(n);
    if (n == 0 && buffer.size() != 0) {
        // As Asio's own recv: the end of the stream, after which nothing is left to try.
        ec = boost::asio::error::eof;
        return status::done_and_exhausted;
    }
    return left == 0 ? status::done_and_exhausted : status::done;
}

} // namespace sluice::detail

namespace boost::asio::detail {

/// Asio 1.81's stream recv operation for a `drained_buffer`: as the general one, with a read
/// that left nothing behind it reported as exhausting the socket.
template <>
class reactive_socket_recv_op_base<sluice::detail::drained_buffer> : public reactor_op {
public:
    reactive_socket_recv_op_base(const boost::system::error_code& success_ec,
                                 socket_type socket,
                                 socket_ops::state_type,
                                 const sluice::detail::drained_buffer& buffers,
                                 socket_base::message_flags flags,
                                 func_type complete_func)
        : reactor_op(success_ec, &reactive_socket_recv_op_base::do_perform, complete_func)
        , socket_(socket)
        , buffers_(buffers)
        , flags_(flags) {}

    static status do_perform(reactor_op* base) {
        auto* o = static_cast<reactive_socket_recv_op_base*>(base);
        return sluice::detail::recv_reporting_drained(
            o->socket_, o->buffers_.buffer, o->flags_, o->ec_, o->bytes_transferred_);
    }

private:
    socket_type socket_;
    sluice::detail::drained_buffer buffers_;
    socket_base::message_flags flags_;
};

/// A recv operation for a `readiness_probe`: it reads nothing; done when a look finds something
/// to read (bytes, the end of the stream, an error: the read that follows reports it), or on an
/// event where it does not look. It completes without an error.
template <>
class reactive_socket_recv_op_base<sluice::detail::readiness_probe> : public reactor_op {
public:
    reactive_socket_recv_op_base(const boost::system::error_code& success_ec,
                                 socket_type socket,
                                 socket_ops::state_type,
                                 const sluice::detail::readiness_probe& probe,
                                 socket_base::message_flags,
                                 func_type complete_func)
        : reactor_op(success_ec, &reactive_socket_recv_op_base::do_perform, complete_func)
        , socket_(socket)
        , probe_(probe) {}

    static status do_perform(reactor_op* base) {
        auto* o = static_cast<reactive_socket_recv_op_base*>(base);
        if (*o->probe_.starting || o->probe_.verified) {
            boost::system::error_code ec;
            std::size_t n = 0;
            if (!socket_ops::non_blocking_recv1(o->socket_,
                                                o->probe_.buffer.data(),
                                                o->probe_.buffer.size(),
                                                socket_base::message_peek,
                                                true,
                                                ec,
                                                n)) {
                return not_done; // nothing yet: the next event
            }
        }
        o->ec_ = boost::system::error_code();
        o->bytes_transferred_ = 0;
        return done;
    }

private:
    socket_type socket_;
    sluice::detail::readiness_probe probe_;
};

/// A recv operation for an `event_check`: its try (made only as it starts, when an event came
/// since a read last emptied the socket) reads nothing, records that it was made and completes.
/// Queued instead, it waits for its caller to cancel it.
template <>
class reactive_socket_recv_op_base<sluice::detail::event_check> : public reactor_op {
public:
    reactive_socket_recv_op_base(const boost::system::error_code& success_ec,
                                 socket_type,
                                 socket_ops::state_type,
                                 const sluice::detail::event_check& check,
                                 socket_base::message_flags,
                                 func_type complete_func)
        : reactor_op(success_ec, &reactive_socket_recv_op_base::do_perform, complete_func)
        , check_(check) {}

    static status do_perform(reactor_op* base) {
        auto* o = static_cast<reactive_socket_recv_op_base*>(base);
        *o->check_.tried = true;
        o->ec_ = boost::system::error_code();
        o->bytes_transferred_ = 0;
        return done;
    }

private:
    sluice::detail::event_check check_;
};

} // namespace boost::asio::detail
#endif

namespace sluice {

/// Whether timed_stream's reads can report the socket emptied and its waits start without a
/// system call (see the top of this file).
#ifdef SLUICE_DRAINED_READS
inline constexpr bool drained_reads = true;
#else
inline constexpr bool drained_reads = false;
#endif

/// Has the kernel say, with each read of `socket`, what is left behind it (TCP_INQ), which
/// drained reads need (see the top of this file). Once per connection. A socket where that
/// fails (`ec`) is read as Asio reads.
template <typename Socket>
void enable_drained_reads([[maybe_unused]] Socket& socket, error_code& ec) {
    ec.clear();
#ifdef SLUICE_DRAINED_READS
    socket.set_option(net::detail::socket_option::boolean<IPPROTO_TCP, TCP_INQ>(true), ec);
#endif
}

} // namespace sluice
