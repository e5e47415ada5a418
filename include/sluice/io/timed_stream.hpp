// SPDX-License-Identifier: Apache-2.0
#pragma once

// A TCP stream with a deadline per connection, kept by a lazy watchdog instead of a timer per
// operation.
//
// beast::tcp_stream arms a timer for every read and write and cancels it when the operation
// completes: two timer-queue updates, a cancelled wait that still runs through the scheduler, and
// several layers of composed operation, on every I/O of every request. Here `expires_after` only
// stores a time point. One timer per stream sleeps until the deadline it last saw; when it wakes
// and the deadline has moved on meanwhile (the usual case: the connection kept working), it
// sleeps again until the new one; only when the deadline has really passed does it cancel the
// socket's operations, which then complete with beast::error::timeout, as tcp_stream's would.
// An operation started after that, with no deadline set since, fails at once with the same
// error. The watchdog cancels only what is pending when it fires: if the deadline passed while
// the coroutine awaited something else (a store's decision, another stream), the stream's next
// operation would otherwise have no deadline at all. Every caller today sets a deadline before
// such an operation; this keeps the contract when one does not.
//
// One deadline covers both directions: sluice never reads and writes one stream at once.

#include "sluice/io/coarse_clock.hpp"
#include "sluice/io/drained_read.hpp"
#include "sluice/io/net.hpp"
#include "sluice/io/untried_read.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/handler_continuation_hook.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/error.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace sluice {
namespace detail {

using steady_clock = std::chrono::steady_clock;

/// Where a stream's look (`event_since_emptied`) puts its operation: see look_allocator.
struct look_memory {
    alignas(std::max_align_t) unsigned char bytes[256];
    bool taken = false;
};

/// What the stream and its watchdog's pending wait share; the wait keeps it alive.
struct stream_state {
    explicit stream_state(tcp_socket s)
        : socket(std::move(s))
        , timer(socket.get_executor()) {}

    tcp_socket socket;
    steady_timer timer;
    steady_clock::time_point deadline = steady_clock::time_point::max();
    /// When the pending wait wakes; max: no wait is pending.
    steady_clock::time_point wakes_at = steady_clock::time_point::max();
    /// The deadline passed and the socket's operations were cancelled.
    bool timed_out = false;
    /// An `async_read_reply` is being started (untried_read.hpp).
    bool starting_untried_read = false;
    /// An `async_wait_readable` is being started, and the byte its looks peek into
    /// (drained_read.hpp).
    bool starting_probe = false;
    char probe_byte = 0;
    /// Made at the first look: only the upstream pool's connections look, and 256 bytes in
    /// every client connection's state took its share of an idle one from 921 to 1194 bytes
    /// (bench/memory's measure (b)).
    std::unique_ptr<look_memory> look;
};

/**
 * Allocates the look's operation in its stream's `look_memory`, or, while an earlier look's
 * operation is still there, from the heap. Through Asio's per-thread cache of operation blocks
 * instead, a look is an odd-sized block (128 bytes against the reads' 160), which the cache
 * hands back only for one no larger: other operations then freed a cached block and took a new
 * one from malloc. Under dhat, 19,999 requests on new keys allocated 58,462 blocks, 14,477 of
 * them operations, and 44,213 with this (6c01d13, before the look: 44,028); bench/memory's
 * measure (d), whose keys' blocks those operations left gaps between, went from 116 to 121
 * bytes of RSS per key to 109 and 113 (two runs).
 *
 * Mending the cache itself, as frame_pool.hpp mends the frames', cannot be done on Asio 1.81:
 * thread_info_base's own class body calls allocate<default_tag> (its untagged overloads), so an
 * explicit specialisation for operation blocks always comes after their first use, which the
 * compiler rejects. The blocks of its other purposes (cancellation handlers, type-erased
 * functions) do not reach malloc: dhat counted 43,837 blocks for 19,937 requests on new keys,
 * 2.2 per request, the key's string and its table block.
 */
template <typename T>
struct look_allocator {
    using value_type = T;

    explicit look_allocator(look_memory* m) noexcept
        : memory(m) {}

    template <typename U>
    look_allocator(const look_allocator<U>& other) noexcept // NOLINT: rebinding, as allocators do
        : memory(other.memory) {}

    T* allocate(std::size_t n) {
        if (!memory->taken && n * sizeof(T) <= sizeof(memory->bytes) &&
            alignof(T) <= alignof(std::max_align_t)) {
            memory->taken = true;
            return reinterpret_cast<T*>(memory->bytes);
        }
        return std::allocator<T>().allocate(n);
    }

    void deallocate(T* p, std::size_t n) noexcept {
        if (static_cast<void*>(p) == static_cast<void*>(memory->bytes)) {
            memory->taken = false;
            return;
        }
        std::allocator<T>().deallocate(p, n);
    }

    template <typename U>
    bool operator==(const look_allocator<U>& other) const noexcept {
        return memory == other.memory;
    }

    look_memory* memory;
};

/// The watchdog's wait handler.
struct watchdog {
    std::shared_ptr<stream_state> state;

    static void arm(const std::shared_ptr<stream_state>& state) {
        state->wakes_at = state->deadline;
        state->timer.expires_at(state->deadline);
        state->timer.async_wait(watchdog{state});
    }

    void operator()(error_code ec) const {
        if (ec == net::error::operation_aborted) {
            return; // re-armed for an earlier deadline, or the stream is gone
        }
        auto& s = *state;
        s.wakes_at = steady_clock::time_point::max();
        if (s.deadline == steady_clock::time_point::max()) {
            return;
        }
        if (steady_clock::now() < s.deadline) {
            arm(state);
            return;
        }
        s.timed_out = true;
        error_code ignored;
        s.socket.cancel(ignored);
    }
};

/// Completes an operation of a timed_stream, turning the cancellation by its watchdog into
/// beast::error::timeout. DropCount: the operation is a read standing for a wait
/// (drained_read.hpp), whose handler takes the error alone.
template <typename Handler, bool DropCount = false>
class timeout_handler {
public:
    timeout_handler(Handler handler, const stream_state* state)
        : handler_(std::move(handler))
        , state_(state) {}

    template <typename... Args>
    void operator()(error_code ec, Args&&... args) {
        if (ec == net::error::operation_aborted && state_->timed_out) {
            ec = beast::error::timeout;
        }
        if constexpr (DropCount) {
            std::move(handler_)(ec);
        } else {
            std::move(handler_)(ec, std::forward<Args>(args)...);
        }
    }

    Handler handler_;

private:
    const stream_state* state_;
};

template <typename Handler, bool DropCount>
bool asio_handler_is_continuation(timeout_handler<Handler, DropCount>* h) {
    return boost_asio_handler_cont_helpers::is_continuation(h->handler_);
}

} // namespace detail

/**
 * A TCP stream whose operations fail with beast::error::timeout once the deadline set by
 * `expires_after` passes (see the top of this file). Models Asio's AsyncReadStream and
 * AsyncWriteStream, so Beast's HTTP algorithms and net::async_write work on it.
 *
 * An operation must not outlive its stream, which holds for an operation awaited in the frame
 * that owns the stream.
 */
class timed_stream {
public:
    using executor_type = executor;

    explicit timed_stream(const executor& ex)
        : state_(std::make_shared<detail::stream_state>(tcp_socket(ex))) {}

    explicit timed_stream(tcp_socket socket)
        : state_(std::make_shared<detail::stream_state>(std::move(socket))) {}

    timed_stream(const timed_stream&) = delete;
    timed_stream& operator=(const timed_stream&) = delete;

    ~timed_stream() {
        // The pending wait, if any, completes as aborted and lets go of the state.
        state_->timer.cancel();
        error_code ignored;
        state_->socket.close(ignored);
    }

    executor_type get_executor() noexcept { return state_->socket.get_executor(); }

    tcp_socket& socket() noexcept { return state_->socket; }

    /// Operations started from now on fail with beast::error::timeout after `timeout`, or
    /// at most two clock ticks later (coarse_clock.hpp: a deadline needs no finer clock).
    void expires_after(std::chrono::steady_clock::duration timeout) {
        expires_at(coarse_clock::latest_now() + timeout);
    }

    /// Operations started from now on fail with beast::error::timeout once steady_clock
    /// reaches `deadline`.
    void expires_at(std::chrono::steady_clock::time_point deadline) {
        auto& s = *state_;
        s.timed_out = false;
        s.deadline = deadline;
        if (s.deadline < s.wakes_at) {
            detail::watchdog::arm(state_); // none pending, or it would wake too late
        }
    }

    /**
     * Writes what the socket takes at once, without waiting or queueing an operation: for a
     * small message, usually all of it. net::error::would_block: nothing could be written.
     */
    template <typename ConstBufferSequence>
    std::size_t write_now(const ConstBufferSequence& buffers, error_code& ec) {
        if (!make_non_blocking(ec)) {
            return 0;
        }
        return state_->socket.write_some(buffers, ec);
    }

    /**
     * Reads what the socket holds now, without waiting or queueing an operation: the recv is
     * made whatever the reactor believes (drained_read.hpp), so it also finds an end of the
     * stream or an error that no event will announce again. net::error::would_block: nothing to
     * read; net::error::eof: the peer closed.
     */
    template <typename MutableBufferSequence>
    std::size_t read_now(const MutableBufferSequence& buffers, error_code& ec) {
        if (!make_non_blocking(ec)) {
            return 0;
        }
        return state_->socket.read_some(buffers, ec);
    }

    /**
     * Whether the socket has something to read now (bytes, the end of the stream or an error),
     * reading nothing: one non-blocking recv of a byte with MSG_PEEK. Where bytes are likely
     * there already, it spares `async_wait_readable` its turn of the event loop.
     */
    bool readable_now() {
        error_code ec;
        if (!make_non_blocking(ec)) {
            return true; // the read that follows will say what is wrong
        }
        char byte = 0;
        state_->socket.receive(net::buffer(&byte, 1), tcp_socket::message_peek, ec);
        return ec != net::error::would_block;
    }

    /**
     * Whether the reactor has seen the socket readable (bytes, the end of the stream, an error)
     * since a read last emptied it, with no system call: false means nothing came since, as far
     * as the event loop has looked (an event the kernel has raised but the reactor not yet taken
     * goes unseen). Without drained reads it cannot tell, and says true. Only with no read or
     * wait pending on the stream: its check, queued, is cancelled with whatever is queued.
     */
    bool event_since_emptied() {
        if constexpr (drained_reads) {
            auto& s = *state_;
            if (!s.look) {
                s.look = std::make_unique<detail::look_memory>();
            }
            bool tried = false;
            // The handler keeps the state, and with it the operation's memory, until the
            // operation has run, which may be after the stream is gone.
            s.socket.async_read_some(
                detail::event_check{net::buffer(&s.probe_byte, 1), &tried},
                net::bind_allocator(detail::look_allocator<void>(s.look.get()),
                                    [keep = state_](error_code, std::size_t) {}));
            if (!tried) {
                error_code ignored;
                s.socket.cancel(ignored);
            }
            return tried;
        } else {
            return true;
        }
    }

    /// Whether a look's operation is in the stream's own memory, not yet run (the tests check
    /// that it fits there).
    bool look_in_own_memory_for_test() const noexcept {
        return state_->look && state_->look->taken;
    }

    /**
     * Completes when the socket has something to read (bytes, the end of the stream or an
     * error), reading nothing, so that no buffer waits with it. It sees what is there already
     * as well as what comes later. With drained reads (drained_read.hpp) it is a probe in the
     * reactor's read queue that starts without a system call unless an event came since a read
     * last emptied the socket (then one look) and looks again on each event. Without them,
     * Asio's wait, which re-arms the descriptor with an EPOLL_CTL_MOD (io_uring's poll is one
     * call too) and has the kernel report it at once if readable.
     */
    template <typename Token = net::default_completion_token_t<executor_type>>
    auto async_wait_readable(Token&& token = Token{}) {
        return wait_readable(true, std::forward<Token>(token));
    }

    /**
     * As async_wait_readable, but on an event it completes without a look: it may complete with
     * nothing to read (the event's bytes were taken by a read started before the reactor took
     * it), and the read that follows then waits. For a keep-alive connection's next request,
     * where a look would cost a system call per request.
     */
    template <typename Token = net::default_completion_token_t<executor_type>>
    auto async_wait_event(Token&& token = Token{}) {
        return wait_readable(false, std::forward<Token>(token));
    }

    /// No deadline (a pending wait finds none and stops).
    void expires_never() noexcept {
        state_->timed_out = false;
        state_->deadline = std::chrono::steady_clock::time_point::max();
    }

    /// A read of one buffer that left nothing behind it tells the reactor the socket is empty, so
    /// that the next wait or read starts without a system call (drained_read.hpp: on a socket
    /// given `enable_drained_reads`).
    template <typename MutableBufferSequence,
              typename Token = net::default_completion_token_t<executor_type>>
    auto async_read_some(const MutableBufferSequence& buffers, Token&& token = Token{}) {
        return net::async_initiate<Token, void(error_code, std::size_t)>(
            [this](auto handler, const MutableBufferSequence& b) {
                if (timed_out_already(handler, std::size_t{0})) {
                    return;
                }
                if constexpr (drained_reads &&
                              std::is_convertible_v<MutableBufferSequence, net::mutable_buffer>) {
                    state_->socket.async_read_some(detail::drained_buffer{b},
                                                   wrap(std::move(handler)));
                } else {
                    state_->socket.async_read_some(b, wrap(std::move(handler)));
                }
            },
            token,
            buffers);
    }

    /**
     * async_read_some for the reply to a request whose last byte was written in this turn of the
     * event loop, with nothing buffered: it waits for the socket's next event without the recv
     * that Asio tries first, which cannot succeed yet (untried_read.hpp: one system call less
     * per proxied request).
     */
    template <typename Token = net::default_completion_token_t<executor_type>>
    auto async_read_reply(net::mutable_buffer buffer, Token&& token = Token{}) {
        return net::async_initiate<Token, void(error_code, std::size_t)>(
            [this](auto handler, net::mutable_buffer b) {
                if (timed_out_already(handler, std::size_t{0})) {
                    return;
                }
                auto& s = *state_;
                if constexpr (untried_reads) {
                    s.starting_untried_read = true;
                    s.socket.async_read_some(detail::untried_buffer{b, &s.starting_untried_read},
                                             wrap(std::move(handler)));
                    s.starting_untried_read = false;
                } else {
                    s.socket.async_read_some(b, wrap(std::move(handler)));
                }
            },
            token,
            buffer);
    }

    template <typename ConstBufferSequence,
              typename Token = net::default_completion_token_t<executor_type>>
    auto async_write_some(const ConstBufferSequence& buffers, Token&& token = Token{}) {
        return net::async_initiate<Token, void(error_code, std::size_t)>(
            [this](auto handler, const ConstBufferSequence& b) {
                if (timed_out_already(handler, std::size_t{0})) {
                    return;
                }
                state_->socket.async_write_some(b, wrap(std::move(handler)));
            },
            token,
            buffers);
    }

    template <typename Token = net::default_completion_token_t<executor_type>>
    auto async_connect(const tcp::endpoint& endpoint, Token&& token = Token{}) {
        return net::async_initiate<Token, void(error_code)>(
            [this](auto handler, const tcp::endpoint& e) {
                if (timed_out_already(handler)) {
                    return;
                }
                state_->socket.async_connect(e, wrap(std::move(handler)));
            },
            token,
            endpoint);
    }

private:
    /// Sets the socket non-blocking, once per connection: the `_now` operations must never
    /// block. False (and `ec`) if that failed.
    bool make_non_blocking(error_code& ec) {
        auto& socket = state_->socket;
        ec.clear();
        if (!socket.non_blocking()) {
            socket.non_blocking(true, ec);
        }
        return !ec;
    }

    template <typename Token>
    auto wait_readable(bool verified, Token&& token) {
        return net::async_initiate<Token, void(error_code)>(
            [this, verified](auto handler) {
                if (timed_out_already(handler)) {
                    return;
                }
                auto& s = *state_;
                if constexpr (drained_reads) {
                    s.starting_probe = true;
                    s.socket.async_read_some(
                        detail::readiness_probe{
                            net::buffer(&s.probe_byte, 1), &s.starting_probe, verified},
                        detail::timeout_handler<decltype(handler), true>{std::move(handler), &s});
                    s.starting_probe = false;
                } else {
                    s.socket.async_wait(tcp_socket::wait_read, wrap(std::move(handler)));
                }
            },
            token);
    }

    /// An operation being started after the watchdog fired, with no deadline set since (see the
    /// top of this file): completes `handler` with beast::error::timeout and `rest`, from the
    /// event loop as any completion, and returns true.
    template <typename Handler, typename... Rest>
    bool timed_out_already(Handler& handler, Rest... rest) const {
        if (!state_->timed_out) {
            return false;
        }
        net::post(state_->socket.get_executor(),
                  net::append(std::move(handler), error_code(beast::error::timeout), rest...));
        return true;
    }

    template <typename Handler>
    detail::timeout_handler<Handler> wrap(Handler handler) const {
        return {std::move(handler), state_.get()};
    }

    std::shared_ptr<detail::stream_state> state_;
};

} // namespace sluice

namespace boost::asio {

/// A timeout_handler has its inner handler's executor, allocator and cancellation slot.
template <template <typename, typename> class Associator,
          typename Handler,
          bool DropCount,
          typename DefaultCandidate>
struct associator<Associator, sluice::detail::timeout_handler<Handler, DropCount>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type
    get(const sluice::detail::timeout_handler<Handler, DropCount>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler_);
    }

    static auto get(const sluice::detail::timeout_handler<Handler, DropCount>& h,
                    const DefaultCandidate& c) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler_, c);
    }
};

} // namespace boost::asio
