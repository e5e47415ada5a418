// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/memory_store.hpp"

#include "sluice/limiter/algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::store {
namespace {

struct entry {
    limiter::state state;
    /// From this clock reading on, the state equals a fresh one: the key may be forgotten.
    double idle_at_ms = 0;
};

/// A key with its hash, computed once per request: it picks the shard and then the bucket.
struct hashed_key {
    std::string_view key;
    std::size_t hash;

    friend bool operator==(const hashed_key& a, const std::string& b) noexcept {
        return a.key == b;
    }
};

// Transparent hashing lets a lookup by std::string_view or hashed_key skip building a
// std::string (and a hashed_key, hashing again).
struct key_hash {
    using is_transparent = void;

    std::size_t operator()(std::string_view key) const noexcept {
        return std::hash<std::string_view>{}(key);
    }

    std::size_t operator()(const hashed_key& key) const noexcept { return key.hash; }
};

struct shard {
    std::mutex mutex;
    std::unordered_map<std::string, entry, key_hash, std::equal_to<>> entries;
};

// What one check would store, computed before anything is committed.
struct pending {
    shard* owner = nullptr;
    entry* existing = nullptr;
    entry next;
};

} // namespace

struct memory_store::impl {
    impl(const sluice::clock& c, std::size_t shard_count)
        : clock(c)
        , shards(std::max<std::size_t>(1, shard_count)) {}

    std::size_t shard_index(const hashed_key& key) const noexcept {
        return key.hash % shards.size();
    }

    const sluice::clock& clock;
    std::vector<shard> shards;
};

memory_store::memory_store(const sluice::clock& clock, std::size_t shard_count)
    : impl_(std::make_unique<impl>(clock, shard_count)) {}

memory_store::~memory_store() = default;

awaitable<outcome> memory_store::acquire(checks request_checks) {
    co_return acquire_now(request_checks);
}

std::optional<outcome> memory_store::try_acquire_now(const checks& request_checks) {
    return acquire_now(request_checks);
}

outcome memory_store::acquire_now(const checks& request_checks) {
    boost::container::small_vector<hashed_key, 2> keys;
    for (const auto& c : request_checks) {
        keys.push_back({c.key, key_hash{}(std::string_view{c.key})});
    }
    // Lock every shard the request touches, in index order so two requests never deadlock.
    boost::container::small_vector<std::size_t, 2> order;
    for (const auto& k : keys) {
        order.push_back(impl_->shard_index(k));
    }
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    boost::container::small_vector<std::unique_lock<std::mutex>, 2> locks;
    for (auto index : order) {
        locks.emplace_back(impl_->shards[index].mutex);
    }

    // Whole milliseconds, as Redis TIME is used: both stores then see the same timeline.
    const double now = std::floor(impl_->clock.now_ms());

    outcome result;
    boost::container::small_vector<pending, 2> writes;
    bool admitted = true;
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        const auto& c = request_checks[i];
        auto& owner = impl_->shards[impl_->shard_index(keys[i])];
        pending p;
        p.owner = &owner;
        auto found = owner.entries.find(keys[i]);
        const bool exists = found != owner.entries.end();
        if (exists) {
            p.existing = &found->second;
            p.next = found->second;
        }
        auto d = limiter::acquire(p.next.state, exists, *c.limit, now);
        p.next.idle_at_ms = now + static_cast<double>(d.reset_after.count());
        admitted = admitted && (d.allowed || c.limit->dry_run);
        result.decisions.push_back(d);
        writes.push_back(p);
    }

    // Charge every limit only when every enforced limit admits; otherwise store nothing.
    if (admitted) {
        for (std::size_t i = 0; i < writes.size(); ++i) {
            auto& w = writes[i];
            if (w.existing != nullptr) {
                *w.existing = w.next;
            } else {
                w.owner->entries.insert_or_assign(request_checks[i].key, w.next);
            }
        }
    }
    return result;
}

std::size_t memory_store::sweep() {
    const double now = std::floor(impl_->clock.now_ms());
    std::size_t forgotten = 0;
    for (auto& s : impl_->shards) {
        std::lock_guard lock(s.mutex);
        forgotten +=
            std::erase_if(s.entries, [now](const auto& kv) { return kv.second.idle_at_ms <= now; });
    }
    return forgotten;
}

std::size_t memory_store::size() const {
    std::size_t total = 0;
    for (auto& s : impl_->shards) {
        std::lock_guard lock(s.mutex);
        total += s.entries.size();
    }
    return total;
}

} // namespace sluice::store
