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
// instead. Either way one system call per wait: bench/run counted 4.3 to 5.3 per request.
//
// Two buffer types mark the operations this changes (the specialisations below of Asio 1.81's
// recv operation, the only code that knows those internals besides untried_read.hpp's):
// - `drained_buffer`: a recv that reads fewer bytes than its buffer holds emptied the socket,
//   and says so. TCP returns less than asked only when its receive queue has nothing more in
//   order (nginx's epoll module relies on the same: `rev->ready = 0` after a short read); any
//   bytes that come later raise a new event, which sets the flag again.
// - `readiness_probe`: the wait. It reads nothing. Started while the flag is clear, it is queued
//   without a system call and completes at the next event. Started while the flag is set (an
//   event came since the socket was last seen empty: a new connection, or bytes that came while
//   a read was under way, whose event the reactor took after the read), it looks with a recv of
//   a byte with MSG_PEEK, and waits for the next event if there is nothing. On an event it
//   completes without a look, unless it is a `verified` probe (a parked connection or a held
//   request, where a wake with nothing to read would cost a coroutine): an event can still find
//   nothing when a read that took its bytes ran before the reactor took it, and the read that
//   follows then waits as any read does.
// The one way a short read can leave bytes behind is TCP urgent data (a recv stops at the urgent
// mark): a client that sends it may stall its own connection until its deadline, never another.
//
// Only for the Boost version whose internals this was written against (Debian 12's 1.81) and the
// epoll reactor; elsewhere `drained_reads` is false and timed_stream reads and waits as Asio does.

#include "sluice/io/net.hpp"

#include <boost/asio/detail/reactive_socket_recv_op.hpp>

namespace sluice::detail {

/// One buffer for a read whose short read reports the socket empty (see the top of this file).
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

} // namespace sluice::detail

#if BOOST_VERSION / 100 == 1081 && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT) &&                 \
    defined(BOOST_ASIO_HAS_EPOLL)
#define SLUICE_DRAINED_READS 1

namespace boost::asio::detail {

/// Asio 1.81's stream recv operation for a `drained_buffer`: as the general one, with a short
/// read reported as exhausting the socket.
template <>
class reactive_socket_recv_op_base<sluice::detail::drained_buffer> : public reactor_op {
public:
    reactive_socket_recv_op_base(const boost::system::error_code& success_ec,
                                 socket_type socket,
                                 socket_ops::state_type state,
                                 const sluice::detail::drained_buffer& buffers,
                                 socket_base::message_flags flags,
                                 func_type complete_func)
        : reactor_op(success_ec, &reactive_socket_recv_op_base::do_perform, complete_func)
        , socket_(socket)
        , state_(state)
        , buffers_(buffers)
        , flags_(flags) {}

    static status do_perform(reactor_op* base) {
        auto* o = static_cast<reactive_socket_recv_op_base*>(base);
        const bool stream = (o->state_ & socket_ops::stream_oriented) != 0;
        if (!socket_ops::non_blocking_recv1(o->socket_,
                                            o->buffers_.buffer.data(),
                                            o->buffers_.buffer.size(),
                                            o->flags_,
                                            stream,
                                            o->ec_,
                                            o->bytes_transferred_)) {
            return not_done;
        }
        // An error leaves the flag as Asio's own recv would (set: the next read tries again).
        if (stream && !o->ec_ && o->bytes_transferred_ < o->buffers_.buffer.size()) {
            return done_and_exhausted;
        }
        return done;
    }

private:
    socket_type socket_;
    socket_ops::state_type state_;
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

} // namespace boost::asio::detail
#endif

namespace sluice {

/// Whether timed_stream's reads report a short read and its waits start without a system call
/// (see the top of this file).
#ifdef SLUICE_DRAINED_READS
inline constexpr bool drained_reads = true;
#else
inline constexpr bool drained_reads = false;
#endif

} // namespace sluice
