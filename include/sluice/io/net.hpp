// SPDX-License-Identifier: Apache-2.0
#pragma once

// Namespace aliases and the Boost 1.81 completion-token idiom, declared once so that no other
// file repeats them (as Beast's chat-multi example does).
//
// Every awaitable I/O object is rebound to `as_tuple_t<use_awaitable_t<>>` as its default token:
// `auto [ec, n] = co_await stream.async_read_some(buf);` then needs no token and never throws,
// which keeps the data plane free of exceptions.
//
// Everything runs on an io_context (one per worker thread, one for control), so the executor is
// io_context's own, not the type-erased any_io_executor: copying, comparing and preferring an
// any_io_executor on every I/O operation and coroutine resumption was a measurable part of a
// proxied request's CPU time.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace sluice {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

/// The executor every coroutine and I/O object runs on.
using io_executor = net::io_context::executor_type;

/// The default completion token: resume the coroutine with a tuple (error_code first).
using tuple_awaitable_t = net::as_tuple_t<net::use_awaitable_t<io_executor>>;
inline constexpr tuple_awaitable_t tuple_awaitable{};

/// An executor whose default completion token is `tuple_awaitable_t`.
using executor = tuple_awaitable_t::executor_with_default<io_executor>;

using tcp_acceptor = tcp::acceptor::rebind_executor<executor>::other;
using tcp_socket = tcp::socket::rebind_executor<executor>::other;
using tcp_stream = beast::tcp_stream::rebind_executor<executor>::other;
using steady_timer = net::steady_timer::rebind_executor<executor>::other;

template <typename T>
using awaitable = net::awaitable<T, io_executor>;

} // namespace sluice
