// SPDX-License-Identifier: Apache-2.0
#pragma once

// A socket read that goes straight to the event loop, without the read Asio tries first.
//
// Asio's epoll reactor starts every socket read with a non-blocking recv ("speculative": the
// bytes may be there already) and only waits for readiness when that fails with EAGAIN. For the
// reply to a request written a moment ago in the same turn of the event loop that try cannot
// succeed: the peer has not even been scheduled. An upstream's response is that case, once per
// proxied request: bench/run counted 6.0 system calls per request with the failed recv,
// 5.0 without it (nginx 5.05).
//
// The read's buffer type marks it (`untried_buffer`), and Asio's recv operation for that type
// (the specialisation below; with drained_read.hpp's, the only code that knows Asio's
// internals) reports "not done" when the reactor tries it during the read's start, which queues
// it without a system call. Every later try, made when epoll reports the socket readable, is a
// drained read (drained_read.hpp): the recv, and the kernel's count of what is left behind it.
//
// Why this cannot miss bytes: the reactor's registration is edge-triggered, so only bytes whose
// edge the reactor took before the read was queued would go unseen, and a reply's bytes cannot
// come before its request. A peer that sent something unasked is answered by the request: its
// reply, or a reset if it had closed, is a new edge. So the caller must start the read in the same
// turn of the event loop as the write of the request's last byte, on a connection with nothing
// buffered: no epoll_wait in between.
//
// Only for the Boost version whose internals this was written against (Debian 12's 1.81) and the
// epoll reactor; elsewhere `untried_reads` is false and callers read as usual.

#include "sluice/io/drained_read.hpp"
#include "sluice/io/net.hpp"

#include <boost/asio/detail/reactive_socket_recv_op.hpp>
#include <boost/version.hpp>

namespace sluice::detail {

/// One buffer for a read whose start tries nothing (see the top of this file).
struct untried_buffer {
    net::mutable_buffer buffer;
    /// True while the read is being started: the try the reactor makes then is skipped.
    const bool* starting;

    const net::mutable_buffer* begin() const noexcept { return &buffer; }

    const net::mutable_buffer* end() const noexcept { return &buffer + 1; }
};

} // namespace sluice::detail

#if BOOST_VERSION / 100 == 1081 && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT) &&                 \
    defined(BOOST_ASIO_HAS_EPOLL)
#define SLUICE_UNTRIED_READS 1

namespace boost::asio::detail {

/// Asio 1.81's stream recv operation for an `untried_buffer`: as the general one, with the try
/// during the read's start skipped, and a read that empties the socket reported as such, as
/// drained_read.hpp's are (so that what comes on the connection after it raises the reactor's
/// flag again: `timed_stream::event_since_emptied`).
template <>
class reactive_socket_recv_op_base<sluice::detail::untried_buffer> : public reactor_op {
public:
    reactive_socket_recv_op_base(const boost::system::error_code& success_ec,
                                 socket_type socket,
                                 socket_ops::state_type,
                                 const sluice::detail::untried_buffer& buffers,
                                 socket_base::message_flags flags,
                                 func_type complete_func)
        : reactor_op(success_ec, &reactive_socket_recv_op_base::do_perform, complete_func)
        , socket_(socket)
        , buffers_(buffers)
        , flags_(flags) {}

    static status do_perform(reactor_op* base) {
        auto* o = static_cast<reactive_socket_recv_op_base*>(base);
        if (*o->buffers_.starting) {
            return not_done;
        }
        return sluice::detail::recv_reporting_drained(
            o->socket_, o->buffers_.buffer, o->flags_, o->ec_, o->bytes_transferred_);
    }

private:
    socket_type socket_;
    sluice::detail::untried_buffer buffers_;
    socket_base::message_flags flags_;
};

} // namespace boost::asio::detail
#endif

namespace sluice {

/// Whether `untried_buffer` reads skip their first try here (see the top of this file).
#ifdef SLUICE_UNTRIED_READS
inline constexpr bool untried_reads = true;
#else
inline constexpr bool untried_reads = false;
#endif

} // namespace sluice
