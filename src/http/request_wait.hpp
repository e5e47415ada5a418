// SPDX-License-Identifier: Apache-2.0
#pragma once

// A request waiting in sluice before it is forwarded (request_wait.cpp): shaping's hold and the
// wait for a CONCURRENCY slot, between request_handler.cpp's decision and its forward.

#include "http/session_state_detail.hpp"
#include "sluice/io/net.hpp"

#include <chrono>

namespace sluice::http::detail {

/// How a hold ended.
enum class hold_end {
    over,    // its time came: forward the request
    left,    // the client left meanwhile: never forwarded
    drained, // a drain stops the worker before its time: answer 503
};

/**
 * Holds a request until its shaping delay is over (`until`), watching its client: it reads
 * ahead what the client sends (at most 64 KiB: a body, pipelined requests; past that it sleeps
 * to the end without watching). The stream's deadline ends the hold; a drain whose deadline
 * comes first ends it at once (`worker_context::begin_drain` wakes it), or stops it from
 * beginning. The stream has no deadline afterwards.
 */
awaitable<hold_end>
hold(connection_state& c, header_scratch& scratch, std::chrono::steady_clock::time_point until);

/**
 * Holds a delayed request (`request_limiter::begin_hold` done) without its coroutine and its
 * memory, when nothing of it lives only there: its header's bytes as they came (`m.header`, from
 * take_header) go back to the front of the connection's buffer, ahead of what followed them, in
 * storage of their size; the limiter's decision (`request_limiter::suspend`), the snapshot and
 * `until` go into `c.held`, and the stream's deadline is set to `until`. The caller then ends
 * the request with `ending::held` and the connection waits for readability (session.cpp
 * `wait_held`), as a parked connection waits, until `resume_request` makes the request again
 * (bench/memory: 1.2 KiB a held request, its connection included, where `hold` takes 6.5 KiB).
 * Not for a request whose body was read ahead (that body, and the parser past it, live in its
 * memory), nor for one whose client already sent as much as `hold` reads ahead, or is sending
 * (bytes wait to be read: a body still coming in). False: nothing changed, hold it in the
 * coroutine (`hold`).
 */
bool suspend_hold(connection_state& c,
                  request_memory& m,
                  std::chrono::steady_clock::time_point until);

/// What a wait for a slot came to.
enum class slot_wait {
    decided,   // decided again: admitted, refused by another limit, or the store failed
    timed_out, // max-delay passed without a free slot
    left,      // the client left
    drained,   // a drain began that ends before max-delay: decided once more, still queued
};

/**
 * Waits in the line of the slot's key (CONCURRENCY, mode shape) until woken by a freed slot or
 * the recheck interval, then decides the request again, until it is no longer queued. Every
 * limit of the request is decided again each time: nothing was charged while it was queued.
 * A drain whose deadline comes before the wait's `max-delay` ends it when it begins (the socket
 * and the timer cancelled): how long it would go on is unknown, and the worker stops at the
 * deadline.
 */
awaitable<slot_wait> wait_for_slot(connection_state& c, request_state& r);

} // namespace sluice::http::detail
