// SPDX-License-Identifier: Apache-2.0
#pragma once

// Binds a hiredis 0.14.1 async context to an Asio executor: private to src/redis.

#include <boost/asio/any_io_executor.hpp>

#include <cstddef>

struct redisAsyncContext;

namespace sluice::redis::detail {

/**
 * Installs the event hooks on `ac` so that hiredis reads and writes when its socket is ready,
 * on `ex`. Returns false (and installs nothing) when `ac` already has hooks or no valid fd.
 *
 * The adapter frees itself after hiredis calls its `cleanup` hook (on disconnect or free),
 * once its outstanding waits have finished; it never closes the fd, which hiredis owns.
 */
bool attach_asio(redisAsyncContext* ac, const boost::asio::any_io_executor& ex);

/**
 * The most of one reply a connection takes before it is dropped as broken: a reply that never
 * ends (a bulk string announced longer than it comes, an array whose elements keep coming)
 * would otherwise grow the reader without bound. sluice's largest is `CLUSTER SLOTS` of a
 * cluster split into every one of its 16384 slots, about 2.5 MB with two replicas each.
 */
inline constexpr std::size_t max_reply_bytes = 16 * 1024 * 1024;

} // namespace sluice::redis::detail
