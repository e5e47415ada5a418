// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/memory_store.hpp"

#include "sluice/core/log_throttle.hpp"
#include "sluice/limiter/algorithm.hpp"
#include "sluice/store/slot_waiters.hpp"
#include "store/key_table.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::store {
namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

/// After a sweep of a full shard that freed less than 1/8 of it, the next sweep waits this long
/// (lossy evictions fill the gap): a shard of live keys is then scanned at most once per second,
/// however fast new keys arrive.
constexpr double sweep_backoff_ms = 1000;

/// A key with its hash, computed once per request: it picks the shard and then the bucket.
struct hashed_key {
    std::string_view key;
    std::size_t hash;

    explicit hashed_key(std::string_view k) noexcept
        : key(k)
        , hash(key_table::hash(k)) {}
};

struct shard {
    std::mutex mutex;
    /// The keys and their recency list (a full shard evicts the least recently used).
    key_table entries;
    /// Keys this shard may hold.
    std::size_t max_keys = std::numeric_limits<std::size_t>::max();
    /// No entry's idle_at_ms is below this: while the clock is short of it, a sweep frees nothing
    /// (and the periodic sweep passes the shard by without looking).
    double idle_floor_ms = infinity;
    /// The periodic sweep's floor under way: the least idle_at_ms of the keys it has kept so far
    /// in this shard, and of every one written since it began here (see `lower_floor`). When it
    /// has looked at every bucket, it is the shard's idle_floor_ms.
    double pass_floor_ms = infinity;
    /// A full shard is not swept again before this reading.
    double next_sweep_ms = -infinity;
    /// -infinity until a sweep of this shard forgets a key; from then on, the newest clock
    /// reading the shard has used, and decisions never read the clock as earlier (see `now`).
    double clock_floor_ms = -infinity;

    /// The shard's reading of `now_ms`. A forgotten state equals a fresh one from its
    /// idle_at_ms on, but not before: a clock stepping back behind the sweep would find the key
    /// fresh where its state still counted (a window reopened, a drained queue refilled). So a
    /// shard that has forgotten a key reads its clock as never going back, which makes
    /// forgetting change no decision. A steady clock never goes back: then this changes nothing.
    double now(double now_ms) noexcept {
        if (clock_floor_ms == -infinity) {
            return now_ms;
        }
        clock_floor_ms = std::max(clock_floor_ms, now_ms);
        return clock_floor_ms;
    }

    /// A key's idle_at_ms is now `ms`: the floors go down to it.
    void lower_floor(double ms) noexcept {
        idle_floor_ms = std::min(idle_floor_ms, ms);
        pass_floor_ms = std::min(pass_floor_ms, ms);
    }

    /// Forgets the keys whose state has fully reset in the buckets from `pos` on, at most
    /// `max_buckets` of them, into `freed`; lowers `floor` to the idle_at_ms of each key kept.
    /// Returns the buckets looked at.
    std::size_t sweep_some(double now,
                           key_table::walk_position& pos,
                           std::size_t max_buckets,
                           double& floor,
                           key_table::retired& freed) {
        const auto before = freed.size();
        const auto looked_at = entries.unlink_if(
            pos,
            max_buckets,
            [now, &floor](const key_table::node& e) {
                if (e.idle_at_ms() <= now) {
                    return true;
                }
                floor = std::min(floor, e.idle_at_ms());
                return false;
            },
            freed);
        if (freed.size() > before) {
            clock_floor_ms = std::max(clock_floor_ms, now);
        }
        return looked_at;
    }

    /// Forgets every key whose state has fully reset, into `freed`; recomputes idle_floor_ms
    /// exactly. Returns how many.
    std::size_t sweep(double now, key_table::retired& freed) {
        const auto before = freed.size();
        double floor = infinity;
        key_table::walk_position all;
        sweep_some(now, all, entries.bucket_count(), floor, freed);
        idle_floor_ms = floor;
        return freed.size() - before;
    }
};

// What one check would store, computed before anything is committed.
struct pending {
    shard* owner = nullptr;
    key_table::node* existing = nullptr;
    limiter::state state;
    double idle_at_ms = 0;
    /// CONCURRENCY: the count a slot taken here is of.
    std::uint64_t epoch = 0;
};

} // namespace

struct memory_store::impl {
    impl(const sluice::clock& c, std::size_t shard_count, memory_store_limits l)
        : clock(c)
        , limits(l)
        , shards(shards_for(shard_count, l.max_keys)) {
        if (limits.max_keys == 0) {
            return;
        }
        // Split the cap exactly: the shards' caps add up to max_keys.
        const auto n = shards.size();
        for (std::size_t i = 0; i < n; ++i) {
            shards[i].max_keys = limits.max_keys / n + (i < limits.max_keys % n ? 1 : 0);
        }
    }

    /// At least one shard, and no more shards than keys, so that every shard holds a key.
    static std::size_t shards_for(std::size_t shard_count, std::size_t max_keys) noexcept {
        const auto n = std::max<std::size_t>(1, shard_count);
        return max_keys == 0 ? n : std::min(n, max_keys);
    }

    std::size_t shard_index(const hashed_key& key) const noexcept {
        return key.hash % shards.size();
    }

    /// Makes room for one more key in a full shard: keys whose state equals a fresh one go first
    /// (nothing is lost), then the least recently used (its client's limit starts over), but
    /// never a key holding CONCURRENCY slots: forgotten, its count would start over while its
    /// requests still run (more in flight than its limit), and their releases would lower the
    /// count of the requests after them. When only such keys are left, the shard goes over its
    /// cap by them, a number bounded by the requests in flight.
    void make_room(shard& s, double now, key_table::retired& freed) {
        if (now >= s.idle_floor_ms && now >= s.next_sweep_ms) {
            if (s.sweep(now, freed) < s.max_keys / 8) {
                s.next_sweep_ms = now + sweep_backoff_ms;
            }
        }
        std::uint64_t evicted = 0;
        std::size_t passed = 0;
        while (s.entries.size() >= s.max_keys && s.entries.oldest() != nullptr) {
            auto& oldest = *s.entries.oldest();
            if (oldest.idle_at_ms() == infinity) { // holds slots (acquire_now)
                if (++passed > s.entries.size()) {
                    break; // every key holds slots
                }
                // Made the newest, so that the next eviction does not pass it again: keys
                // holding slots are in use.
                s.entries.touch(oldest);
                continue;
            }
            s.entries.unlink(oldest, freed);
            ++evicted;
        }
        if (evicted == 0) {
            return;
        }
        if (limits.evictions != nullptr) {
            limits.evictions->fetch_add(evicted, std::memory_order_relaxed);
        }
        log_throttled(full_warning,
                      spdlog::level::warn,
                      "memory store full (rate-limit.memory.max-keys {}): evicting the least "
                      "recently used keys; their clients' limits start over",
                      limits.max_keys);
    }

    /**
     * `insert`, or, when the key cannot be held (out of memory; a key no table holds), its
     * charge dropped as an eviction would drop it, with a warning (`what` says whose charge):
     * where it is called, what came before it is committed already and nothing may fail (a
     * settlement, noexcept, ended the process; an admission lost the slots it had taken). The
     * keys a full shard forgets go to `freed`, for the caller to free once it has unlocked.
     */
    void insert_or_drop(shard& s,
                        const hashed_key& key,
                        pending& p,
                        double now,
                        const char* what,
                        key_table::retired& freed) noexcept {
        try {
            insert(s, key, p, now, freed);
        } catch (const std::exception& e) {
            try { // the line allocates too, and memory may be what ran out
                log_throttled(lost_charge_warning,
                              spdlog::level::warn,
                              "memory store: {} on a key it cannot hold is dropped: {}",
                              what,
                              e.what());
            } catch (...) {
            }
        }
    }

    void
    insert(shard& s, const hashed_key& key, pending& p, double now, key_table::retired& freed) {
        if (s.entries.size() >= s.max_keys) {
            make_room(s, now, freed);
        }
        // The same key twice in one request: the second finds the first (unless it was evicted
        // making room).
        auto* e = s.entries.find(key.key, key.hash);
        if (e == nullptr) {
            e = &s.entries.insert(key.key, key.hash);
        } else {
            s.entries.touch(*e);
        }
        e->set_state(std::move(p.state));
        e->set_idle_at_ms(p.idle_at_ms);
        s.lower_floor(p.idle_at_ms);
    }

    const sluice::clock& clock;
    memory_store_limits limits;
    slot_waiters* waiters = nullptr;
    std::vector<shard> shards;
    /// The last CONCURRENCY count's epoch given (concurrency_state::epoch).
    std::atomic<std::uint64_t> epochs{0};
    /// The periodic sweep's place (only `sweep_slice` moves it): the shard it is in, and where
    /// in that shard's table when `in_shard`.
    std::size_t sweep_shard = 0;
    key_table::walk_position sweep_at;
    bool in_shard = false;
    log_throttle full_warning{std::chrono::minutes(1)};
    log_throttle lost_charge_warning{std::chrono::minutes(1)};
};

memory_store::memory_store(const sluice::clock& clock,
                           std::size_t shard_count,
                           memory_store_limits limits)
    : impl_(std::make_unique<impl>(clock, shard_count, limits)) {}

memory_store::~memory_store() = default;

awaitable<outcome> memory_store::acquire(checks request_checks) {
    co_return acquire_now(request_checks);
}

std::optional<outcome> memory_store::try_acquire_now(const checks& request_checks) {
    return acquire_now(request_checks);
}

// The memory store's one critical section, in one function so that what runs under the shards'
// locks is all in view: lock, read the clock, decide every check, then charge all or nothing.
outcome memory_store::acquire_now(const checks& request_checks) {
    boost::container::small_vector<hashed_key, 2> keys;
    for (const auto& c : request_checks) {
        keys.emplace_back(c.key);
    }
    // Lock every shard the request touches, in index order so two requests never deadlock.
    boost::container::small_vector<std::size_t, 2> order;
    for (const auto& k : keys) {
        order.push_back(impl_->shard_index(k));
    }
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    // Before the locks: what a full shard forgets making room is freed after they are let go.
    key_table::retired freed;
    boost::container::small_vector<std::unique_lock<std::mutex>, 2> locks;
    for (auto index : order) {
        locks.emplace_back(impl_->shards[index].mutex);
    }

    // Whole milliseconds, as Redis TIME is used: both stores then see the same timeline. Never
    // behind what a shard that forgot a key has read (see shard::now); one reading for all.
    double now = std::floor(impl_->clock.now_ms());
    for (auto index : order) {
        now = impl_->shards[index].now(now);
    }
    for (auto index : order) {
        impl_->shards[index].now(now);
    }

    outcome result;
    boost::container::small_vector<pending, 2> writes;
    bool admitted = true;
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        const auto& c = request_checks[i];
        auto& owner = impl_->shards[impl_->shard_index(keys[i])];
        pending p;
        p.owner = &owner;
        auto* found = owner.entries.find(keys[i].key, keys[i].hash);
        const bool exists = found != nullptr;
        if (exists) {
            p.existing = found;
            p.state = found->state();
            owner.entries.touch(*found); // a rejected request is use too
        }
        auto d = limiter::acquire(p.state, exists, *c.limit, now, c.cost);
        if (auto* count = std::get_if<limiter::concurrency_state>(&p.state)) {
            if (count->epoch == 0) { // a fresh count
                count->epoch = impl_->epochs.fetch_add(1, std::memory_order_relaxed) + 1;
            }
            p.epoch = count->epoch;
        }
        // A key holding slots is never forgotten: its slots come back by `release`.
        p.idle_at_ms = d.in_flight ? infinity : now + static_cast<double>(d.reset_after.count());
        admitted = admitted && (d.allowed || c.limit->dry_run);
        result.decisions.push_back(d);
        writes.push_back(std::move(p));
    }

    // Charge every limit only when every enforced limit admits; otherwise store nothing.
    if (admitted) {
        // Existing keys first: making room for a new key may evict or sweep entries, and no
        // pointer into the table may be used after that.
        for (auto& w : writes) {
            if (w.existing != nullptr) {
                w.existing->set_state(std::move(w.state));
                w.existing->set_idle_at_ms(w.idle_at_ms);
                w.owner->lower_floor(w.idle_at_ms);
            }
        }
        for (std::size_t i = 0; i < writes.size(); ++i) {
            if (writes[i].existing == nullptr) {
                // The existing keys' charges stand: an admission's charge on a new key that
                // cannot be held is dropped, and its request goes on (a slot taken there is
                // released to no key, as an evicted key's is).
                impl_->insert_or_drop(
                    *writes[i].owner, keys[i], writes[i], now, "an admission", freed);
            }
        }
        for (std::size_t i = 0; i < request_checks.size(); ++i) {
            if (result.decisions[i].in_flight && result.decisions[i].allowed) {
                const auto& l = *request_checks[i].limit;
                result.slots.push_back({request_checks[i].key, {}, l.lease, writes[i].epoch});
            }
        }
    }
    return result;
}

void memory_store::release(std::span<const slot> taken) noexcept {
    for (const auto& s : taken) {
        const hashed_key key(s.key);
        auto& owner = impl_->shards[impl_->shard_index(key)];
        // Whether a slot of the key's count came free: only then is a waiter woken, who would
        // otherwise spend a decision on a slot that never freed. A key no longer held (dropped
        // from a full store) counts afresh: its waiters may find room.
        bool freed = true;
        {
            std::lock_guard lock(owner.mutex);
            // Gone only when evicted from a full store: that key's count started over already,
            // and a count begun since (or after another algorithm's state) has an epoch of its
            // own, which this slot's release leaves alone.
            if (auto* found = owner.entries.find(key.key, key.hash); found != nullptr) {
                // Changed in place: taken out and put back, which allocates nothing.
                auto state = found->take_state();
                const auto* count = std::get_if<limiter::concurrency_state>(&state);
                freed = count != nullptr && count->epoch == s.epoch && count->in_flight > 0;
                const bool idle = limiter::release(state, s.epoch);
                found->set_state(std::move(state));
                if (idle) {
                    found->set_idle_at_ms(-infinity);
                    owner.lower_floor(-infinity);
                }
            }
        }
        if (freed && impl_->waiters != nullptr) {
            impl_->waiters->notify(s.key);
        }
    }
}

void memory_store::settle(std::span<const settlement> adjustments) noexcept {
    for (const auto& a : adjustments) {
        if (a.limit == nullptr || a.delta == 0 || !limiter::settles(a.limit->algo)) {
            continue; // nothing to adjust: no need to lock
        }
        const hashed_key key(a.key);
        auto& owner = impl_->shards[impl_->shard_index(key)];
        key_table::retired freed; // freed after the lock is let go
        std::lock_guard lock(owner.mutex);
        // Whole milliseconds, read under the lock, as `acquire_now` does.
        const double now = owner.now(std::floor(impl_->clock.now_ms()));
        auto* found = owner.entries.find(key.key, key.hash);
        const bool exists = found != nullptr;
        pending p;
        if (exists) {
            p.state = found->state();
        }
        const auto reset = limiter::settle(p.state, exists, *a.limit, now, a.delta);
        if (!reset) {
            continue; // nothing changed
        }
        p.idle_at_ms = now + static_cast<double>(reset->count());
        if (exists) {
            found->set_state(std::move(p.state));
            found->set_idle_at_ms(p.idle_at_ms);
            owner.lower_floor(p.idle_at_ms);
            owner.entries.touch(*found);
        } else {
            // A charge on a forgotten key: its debt must be remembered.
            impl_->insert_or_drop(owner, key, p, now, "a settlement's charge", freed);
        }
    }
}

void memory_store::set_waiters(slot_waiters* waiters) noexcept {
    impl_->waiters = waiters;
}

memory_store::sweep_step memory_store::sweep_slice(std::size_t max_buckets) {
    auto& m = *impl_;
    const double now = std::floor(m.clock.now_ms());
    sweep_step step;
    // Before the locks: the forgotten keys are freed once every lock is let go.
    key_table::retired freed;
    while (m.sweep_shard < m.shards.size() && step.buckets < max_buckets) {
        auto& s = m.shards[m.sweep_shard];
        std::lock_guard lock(s.mutex);
        if (!m.in_shard) {
            if (now < s.idle_floor_ms) {
                ++m.sweep_shard; // no key of it can have reset yet: nothing to look at
                continue;
            }
            m.in_shard = true;
            m.sweep_at = {};
            s.pass_floor_ms = infinity;
        }
        step.buckets +=
            s.sweep_some(now, m.sweep_at, max_buckets - step.buckets, s.pass_floor_ms, freed);
        if (!m.sweep_at.done) {
            break; // this slice's buckets are looked at
        }
        // Every key kept was looked at, or written since the shard's walk began (lower_floor).
        s.idle_floor_ms = s.pass_floor_ms;
        // Only here, not in the sweeps that make room: a full shard refills at once. And only
        // when few keys are left (as many as a slice has buckets), since a shrink hashes every
        // key left again under the lock: at 2,000,000 keys, 7 of 8 of them reset, a shard's
        // shrink moved 3,900 keys and held its lock 2 to 4 ms, where a slice holds it 0.3 ms.
        // A shard that keeps more keys keeps its buckets, 8 bytes each, at most 2 for each key it
        // held at its peak (beside a key's 96 bytes or more), until it drains that far.
        if (s.entries.size() <= sweep_slice_buckets) {
            s.entries.shrink(freed);
        }
        m.in_shard = false;
        ++m.sweep_shard;
        if (freed.holds_buckets()) {
            break; // `freed` holds one shrink's buckets: the next shard's are the next slice's
        }
    }
    step.forgotten = freed.size();
    if (m.sweep_shard == m.shards.size()) {
        m.sweep_shard = 0;
        step.pass_done = true;
    }
    return step;
}

std::size_t memory_store::sweep() {
    // A pass of its own, from the first shard: whatever a pass under way had looked at is
    // looked at again.
    impl_->sweep_shard = 0;
    impl_->in_shard = false;
    std::size_t forgotten = 0;
    for (;;) {
        const auto step = sweep_slice(std::numeric_limits<std::size_t>::max());
        forgotten += step.forgotten;
        if (step.pass_done) {
            return forgotten;
        }
    }
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
