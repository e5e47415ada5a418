// SPDX-License-Identifier: Apache-2.0
#pragma once

// Binds a hiredis 0.14.1 async context to an Asio executor: private to src/redis.

#include <boost/asio/any_io_executor.hpp>

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

} // namespace sluice::redis::detail
