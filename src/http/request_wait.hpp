// SPDX-License-Identifier: Apache-2.0
#pragma once

// A request waiting in sluice before it is forwarded (request_wait.cpp): shaping's hold and the
// wait for a CONCURRENCY slot, between request_handler.cpp's decision and its forward.

#include "http/session_state_detail.hpp"
#include "sluice/io/net.hpp"

#include <chrono>

namespace sluice::http::detail {

/**
 * Holds a request until its shaping delay is over (`until`), watching its client: it reads
 * ahead what the client sends (at most 64 KiB: a body, pipelined requests; past that it sleeps
 * to the end without watching). The stream's deadline ends the hold. Returns false if the
 * client left meanwhile. The stream has no deadline afterwards.
 */
awaitable<bool>
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
};

/**
 * Waits in the line of the slot's key (CONCURRENCY, mode shape) until woken by a freed slot or
 * the recheck interval, then decides the request again, until it is no longer queued. Every
 * limit of the request is decided again each time: nothing was charged while it was queued.
 */
awaitable<slot_wait> wait_for_slot(connection_state& c, request_state& r);

} // namespace sluice::http::detail
