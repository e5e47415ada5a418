// SPDX-License-Identifier: Apache-2.0
#pragma once

// A DNS stand-in for an `address_cache`'s lookups (the upstream pool's, the Redis client's), so
// that no test depends on the machine's resolver.

#include "sluice/io/address_cache.hpp"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace sluice::test {

/// Answers 127.0.0.1 at once, or fails, or holds the lookups of one host until released. Shared
/// with the lookup threads, which may outlive a test's cache.
struct fake_dns {
    std::mutex mutex;
    std::condition_variable changed;
    /// Lookups of this host wait until it changes.
    std::string held;
    bool fail = false;
    int asked = 0;
    int returned = 0;

    void hold(std::string host) {
        std::lock_guard lock(mutex);
        held = std::move(host);
    }

    void release() {
        std::lock_guard lock(mutex);
        held.clear();
        changed.notify_all();
    }

    void fail_from_now(bool f) {
        std::lock_guard lock(mutex);
        fail = f;
    }

    /// Lookups started so far (returned or not).
    int lookups_asked() {
        std::lock_guard lock(mutex);
        return asked;
    }

    /// Whether a lookup waits for `release` now (asked and not returned).
    bool lookup_held() {
        std::lock_guard lock(mutex);
        return asked > returned;
    }

    /// Whether `n` lookups have returned within `limit`.
    bool wait_returned(int n, std::chrono::milliseconds limit = std::chrono::milliseconds(5'000)) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, limit, [&] { return returned >= n; });
    }

    lookup_result lookup(const std::string& host) {
        std::unique_lock lock(mutex);
        ++asked;
        changed.wait(lock, [&] { return held != host; });
        ++returned;
        changed.notify_all();
        if (fail) {
            return {net::error::host_not_found_try_again, {}};
        }
        return {{}, {net::ip::address_v4::loopback()}};
    }
};

/// A lookup that asks `dns`, which it keeps alive.
inline lookup_function lookups_of(std::shared_ptr<fake_dns> dns) {
    return [dns = std::move(dns)](const std::string& host) {
        return dns->lookup(host);
    };
}

} // namespace sluice::test
