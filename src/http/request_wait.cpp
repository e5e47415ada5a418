// SPDX-License-Identifier: Apache-2.0
// A request waiting in sluice before it is forwarded: shaping's hold, watching its client (in
// its coroutine, or given up with its memory: `suspend_hold`), and the wait for a CONCURRENCY
// slot.
#include "http/request_wait.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core/error.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <variant>

namespace sluice::http::detail {
namespace {

using std::chrono::steady_clock;

/// A held request reads ahead at most this much (body or pipelined requests) while it waits: a
/// body of up to 16 KiB (the default request-buffer-size) and one byte more, so that the close
/// of a client that sent such a body whole is still read (behind unread bytes it would not be),
/// and at `max-held`'s 10,000 no more than 160 MiB in all (64 KiB made that 640 MiB).
constexpr std::size_t hold_read_ahead = 16 * 1024 + 1;

awaitable<void> wait_timer(steady_timer& timer) {
    auto [ec] = co_await timer.async_wait();
    (void)ec;
}

// Reads ahead from a held client to notice it leaving. Waits for bytes without a buffer, so
// that a client that sends nothing (a GET waiting for its slot) makes sluice keep none: the
// buffer grows only when bytes come (a body, or pipelined requests). Returns what ended the
// watch: the client closed or failed, the stream's deadline passed (beast::error::timeout), or
// the watch was cancelled (which `wait_for_slot` does only once the wait is over, and then
// ignores the answer: any other cancellation must not pass for "still there"); no error: it is
// still there but sent `hold_read_ahead` bytes, so watching would mean buffering a body.
//
// The read after a look is made at once (`read_now`), not queued in the reactor: a client that
// sent its request and reset at once leaves the reactor believing the socket empty
// (drained_read.hpp), and a queued read would then wait for the hold's end, which forwarded the
// request of a client long gone (`HeldRequestSentWithAResetIsNeverForwarded`).
awaitable<error_code> watch_client(connection_state& c) {
    for (;;) {
        if (c.buffer.size() >= hold_read_ahead) {
            co_return error_code{};
        }
        if (!c.stream.readable_now()) {
            auto [ec] = co_await c.stream.async_wait_readable();
            if (ec) {
                co_return ec;
            }
        }
        const auto room = std::min<std::size_t>(hold_read_ahead - c.buffer.size(), 16 * 1024);
        error_code ec;
        c.buffer.commit(c.stream.read_now(c.buffer.prepare(room), ec));
        if (ec && ec != net::error::would_block) {
            co_return ec;
        }
    }
}

// What a request waiting in sluice need not keep: an empty read buffer's storage and the header
// scratch, both allocated again when next needed.
void release_buffers(connection_state& c, header_scratch& scratch) {
    if (c.buffer.size() == 0) {
        c.buffer.shrink_to_fit();
    }
    // Not `= {}`: a string's move from an empty one keeps its own storage.
    std::string().swap(scratch.header);
    std::string().swap(scratch.lines);
}

/// How often a request waiting for a slot asks the store again without being woken: the slot
/// of an instance that died frees only when its lease lapses, and nothing announces that. A
/// third of the lease, as the renewals, within [100 ms, 1 s].
milliseconds recheck_interval(const config::limit& limit) {
    return std::clamp(limit.lease / 3, milliseconds{100}, milliseconds{1'000});
}

// Marks the connection's request as waiting in sluice until `until` (on `timer` too, when
// given), for as long as it lives: what a drain looks at to wake the waits that would outlast it.
class waiting_mark {
public:
    waiting_mark(session_entry& entry,
                 steady_clock::time_point until,
                 steady_timer* timer = nullptr) noexcept
        : entry_(entry) {
        entry_.waits_until = until;
        entry_.wait_timer = timer;
    }

    waiting_mark(const waiting_mark&) = delete;
    waiting_mark& operator=(const waiting_mark&) = delete;

    ~waiting_mark() {
        entry_.waits_until = {};
        entry_.wait_timer = nullptr;
    }

private:
    session_entry& entry_;
};

// Sleeps until `until`, or until a drain cancels the timer. In a frame of its own: only a hold
// whose client sent a body's worth sleeps. Its mark ends the hold's too (the hold ends with it).
awaitable<void> sleep_until(session_entry& entry, executor ex, steady_clock::time_point until) {
    steady_timer timer(ex, until);
    const waiting_mark mark(entry, until, &timer);
    co_await wait_timer(timer);
}

} // namespace

awaitable<hold_end>
hold(connection_state& c, header_scratch& scratch, steady_clock::time_point until) {
    // The stream's deadline ends the hold: when it passes, the stream's watchdog cancels the
    // watch, which then ends with beast::error::timeout. A held request thus has no timer of
    // its own, nor a parallel wait of two coroutines (bench/memory: without them, their read
    // buffer and one more frame, a held request went from 14.1 to 7.6 KiB, its connection
    // included). expires_at, not expires_after: a shaping delay ends on time, where a timeout may
    // end up to two clock ticks late (coarse_clock.hpp).
    if (c.w.outlasts_drain(until)) {
        co_return hold_end::drained;
    }
    const waiting_mark mark(c.entry, until);
    c.stream.expires_at(until);
    release_buffers(c, scratch);
    const auto ec = co_await watch_client(c);
    // Every later read and write sets its own deadline.
    c.stream.expires_never();
    if (ec == beast::error::timeout) {
        co_return hold_end::over;
    }
    // The drain's cancellation, or a client that sent a body's worth as the drain began.
    if (c.w.outlasts_drain(until) && (!ec || ec == net::error::operation_aborted)) {
        co_return hold_end::drained;
    }
    if (ec) {
        co_return hold_end::left;
    }
    co_await sleep_until(c.entry, c.stream.get_executor(), until); // it sent a body's worth
    co_return c.w.outlasts_drain(until) ? hold_end::drained : hold_end::over;
}

bool suspend_hold(connection_state& c, request_memory& m, steady_clock::time_point until) {
    auto& r = *m.state;
    // Bytes waiting to be read (a body still coming in) would end the wait at once, and the
    // hold would go on in a coroutine anyway: one look, a system call per held request.
    if (r.body_read_ahead || m.header.empty() || c.buffer.size() >= hold_read_ahead ||
        c.stream.readable_now()) {
        return false;
    }
    auto held = std::make_unique<held_request>(held_request{r.cfg, r.limiter.suspend(), until, {}});
    beast::flat_buffer kept;
    const auto rest = c.buffer.size();
    auto room = kept.prepare(m.header.size() + rest); // an empty buffer allocates just this
    std::memcpy(room.data(), m.header.data(), m.header.size());
    if (rest != 0) {
        std::memcpy(
            static_cast<char*>(room.data()) + m.header.size(), c.buffer.data().data(), rest);
    }
    kept.commit(room.size());
    swap(c.buffer, kept);
    if (m.buffer.capacity() == 0) {
        swap(m.buffer, kept); // the pool's storage goes back with the request's memory
    }
    c.held = std::move(held);
    c.stream.expires_at(until);  // on time, as in hold
    c.entry.waits_until = until; // until resume_hold
    return true;
}

// One loop, over 60 lines, on purpose: the ticket, the timer and the `woken` flag its wake-up
// sets are shared by every step of it (sleep, watch the client, decide, rejoin the line), and a
// step split into a coroutine of its own would be one more frame per turn of each waiter.
awaitable<slot_wait> wait_for_slot(connection_state& c, request_state& r) {
    using namespace net::experimental::awaitable_operators;
    const auto* limit = r.limiter.wait_limit();
    const auto started = steady_clock::now();
    const auto deadline = limit != nullptr && limit->max_delay
                              ? std::optional(started + *limit->max_delay)
                              : std::nullopt;
    const auto recheck = recheck_interval(limit != nullptr ? *limit : config::limit{});
    c.stream.expires_never(); // as in `hold`: the header's deadline must not cut the wait
    steady_timer timer(c.stream.get_executor());
    bool woken = false; // a wake-up may come while the store decides: it must not be lost
    auto wake = [&woken, &timer] {
        woken = true;
        timer.cancel();
    };
    std::string ticket_key(r.limiter.wait_key());
    auto ticket = c.w.waiters->join(ticket_key, c.stream.get_executor(), wake);
    // A wait whose max-delay ends before a drain's deadline goes on; any other ends with it.
    const auto wait_end = deadline.value_or(steady_clock::time_point::max());
    const waiting_mark mark(c.entry, wait_end, &timer);
    bool watching = true;
    while (r.limiter.result().what == verdict::kind::queued) {
        // Draining past its end: decided once more at once, then given up.
        if (!woken && !c.w.outlasts_drain(wait_end)) {
            auto wake_at = steady_clock::now() + recheck;
            if (deadline && *deadline < wake_at) {
                wake_at = *deadline;
            }
            timer.expires_at(wake_at);
            if (watching) {
                auto first = co_await (wait_timer(timer) || watch_client(c));
                if (first.index() == 1) {
                    const auto ec = std::get<1>(first);
                    const bool drain =
                        c.w.outlasts_drain(wait_end) && ec == net::error::operation_aborted;
                    if (ec && !drain) { // it left
                        ticket.give_up();
                        co_return slot_wait::left;
                    }
                    if (!ec) {
                        watching = false; // it sent a body's worth: wait without watching
                        co_await wait_timer(timer);
                    }
                }
            } else {
                co_await wait_timer(timer);
            }
        }
        woken = false;
        if (deadline && steady_clock::now() >= *deadline) {
            ticket.give_up();
            co_return slot_wait::timed_out;
        }
        // Woken or not (the recheck), no wake-up may go to it while it decides: this decision
        // may admit it, and the slot freed meanwhile would then be lost to the line. A recheck
        // by a waiter that is not the oldest, or while a slot announced to another waiter is
        // undecided, could take a slot out of turn (a younger waiter's recheck that fell as the
        // slot freed went ahead of the older one): skipped, to the next recheck or wake-up.
        if (!ticket.begin_decision()) {
            if (c.w.outlasts_drain(wait_end)) {
                ticket.give_up();
                co_return slot_wait::drained;
            }
            continue;
        }
        if (!r.limiter.try_again(c.w, r.limited(c.peer, c.peer_text))) {
            co_await r.limiter.store_decision();
            r.limiter.settle_store_decision();
        }
        if (r.limiter.result().what != verdict::kind::queued) {
            // Admitted, it took the slot it was woken for; otherwise (another limit refused it,
            // the store failed) that slot is still free, and the next waiter's.
            if (r.limiter.result().admitted()) {
                ticket.admitted();
            } else {
                ticket.give_up();
            }
            break;
        }
        if (c.w.outlasts_drain(wait_end)) {
            ticket.give_up();
            co_return slot_wait::drained;
        }
        if (r.limiter.wait_key() != ticket_key) {
            ticket.give_up(); // a wake-up it was given is the old line's
            ticket_key = r.limiter.wait_key();
            ticket = c.w.waiters->join(ticket_key, c.stream.get_executor(), wake);
        } else if (ticket.rearm()) { // keeps its place in the line
            woken = true;            // a slot freed while every waiter decided: try again
        }
    }
    c.w.metrics->slot_wait.observe(steady_clock::now() - started);
    co_return slot_wait::decided;
}

} // namespace sluice::http::detail
