// SPDX-License-Identifier: Apache-2.0
// The Redis store's side of what an outcome gives back after its decision: CONCURRENCY slots
// (taken, renewed while held, released and announced by src/redis/slots.lua), cost settlements
// and Cluster give-backs (limits.lua's settlement and give-back groups). Each is gathered over
// one turn of the event loop and sent in calls of at most `max_batch`, per Cluster slot.
#include "sluice/core/errc.hpp"
#include "sluice/limiter/algorithm.hpp"
#include "sluice/limiter/cost.hpp"
#include "sluice/redis/scripts.hpp"
#include "sluice/store/redis_store.hpp"
#include "sluice/store/slot_waiters.hpp"
#include "store/limits_call.hpp"

#include <boost/asio/post.hpp>
#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sluice::store {

using limits_call::admitted;
using limits_call::algorithm_code;
using limits_call::append_entry;
using limits_call::append_token;
using limits_call::append_u32;
using limits_call::definition_size;
using limits_call::entry_bytes;
using limits_call::format_double;
using limits_call::give_backs_group;
using limits_call::parameters;
using limits_call::settlements_group;
using limits_call::token_bytes;

namespace {

// Takes `items` away in runs, one script call each: a call may touch one Cluster slot's keys only
// (CROSSSLOT otherwise), and takes at most `max_batch` items, so that it keeps Redis busy
// briefly. On Cluster (`by_slot`) the items are first ordered by slot, each slot's in their order
// (a settlement and a give-back of one key keep theirs). `send(slot, run)` is called for each
// run (a std::span of the items, which it may move from); `items` is left empty.
template <typename T, typename SlotOf, typename Send>
void send_in_runs(std::vector<T>& items, bool by_slot, SlotOf slot_of, Send send) {
    if (by_slot) {
        std::stable_sort(items.begin(), items.end(), [&](const T& a, const T& b) {
            return slot_of(a) < slot_of(b);
        });
    }
    std::size_t first = 0;
    while (first < items.size()) {
        const auto slot = slot_of(items[first]);
        std::size_t end = first + 1;
        while (end < items.size() && end - first < redis_store::max_batch &&
               slot_of(items[end]) == slot) {
            ++end;
        }
        send(slot, std::span<T>(items.data() + first, end - first));
        first = end;
    }
    items.clear();
}

// The packed groups of a call of settlements and give-backs (see the header of
// src/redis/limits.lua): a group per run of settlements or of give-backs, in the order they
// came; the i-th entry names key `key_of[i]` and definition `definition_of[i]`.
template <typename Settlement>
std::string packed_groups(std::span<const Settlement> items,
                          const std::vector<std::size_t>& key_of,
                          const std::vector<std::size_t>& definition_of) {
    std::string packed;
    packed.reserve(items.size() * (4 + entry_bytes(true) + token_bytes));
    for (std::size_t i = 0; i < items.size();) {
        const bool run_gives_back = items[i].token.has_value();
        std::size_t end = i;
        while (end < items.size() && items[end].token.has_value() == run_gives_back) {
            ++end;
        }
        append_u32(packed, (run_gives_back ? give_backs_group : settlements_group) | (end - i));
        for (; i < end; ++i) {
            append_entry(packed, key_of[i], definition_of[i], true, items[i].delta);
            if (run_gives_back) {
                append_token(packed, *items[i].token);
            }
        }
    }
    return packed;
}

// The arguments (numkeys and on) of the script call that settles or gives back `items`, each
// distinct key and limit once, as in a batch of requests (limits_call::write_decide_call).
template <typename Settlement>
std::vector<std::string> settlement_call_arguments(std::span<const Settlement> items,
                                                   std::optional<double> now,
                                                   std::chrono::milliseconds ttl) {
    std::vector<std::size_t> key_of(items.size());
    std::vector<std::size_t> definition_of(items.size());
    std::vector<std::size_t> keys;        // the first item of each distinct key
    std::vector<std::size_t> definitions; // the first item of each distinct limit
    for (std::size_t i = 0; i < items.size(); ++i) {
        std::size_t k = 0;
        while (k < keys.size() && items[keys[k]].key != items[i].key) {
            ++k;
        }
        if (k == keys.size()) {
            keys.push_back(i);
        }
        std::size_t d = 0;
        while (d < definitions.size() && !items[definitions[d]].same_limit(items[i])) {
            ++d;
        }
        if (d == definitions.size()) {
            definitions.push_back(i);
        }
        key_of[i] = k + 1;
        definition_of[i] = d + 1;
    }
    std::vector<std::string> args{std::to_string(keys.size())};
    args.reserve(1 + keys.size() + 3 + definition_size * definitions.size() + 2);
    for (const auto k : keys) {
        args.push_back(items[k].key);
    }
    args.push_back(now ? format_double(*now) : std::string());
    args.push_back(std::to_string(ttl.count()));
    args.push_back(std::to_string(definitions.size()));
    for (const auto d : definitions) {
        // Shaping, max_delay and dry_run play no part in a settlement or a give-back.
        const auto& a = items[d];
        args.insert(args.end(), {std::to_string(a.algorithm), a.p1, a.p2, "1", "-1", "0"});
    }
    args.push_back(packed_groups(items, key_of, definition_of));
    args.emplace_back(); // the lease prefix: settlements and give-backs take no slot
    return args;
}

} // namespace

void redis_store::take_slots(const checks& request_checks,
                             outcome& out,
                             std::string_view lease_prefix,
                             std::size_t request_number) {
    if (!admitted(request_checks, out)) {
        return; // refused: the script took nothing
    }
    // Made only for a request that took a slot: a string per request (an allocation, as the
    // prefix is longer than the short-string buffer) cost every request 320 instructions.
    std::string id;
    auto shortest = std::chrono::milliseconds::max();
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        const auto& l = *request_checks[i].limit;
        if (out.decisions[i].in_flight && out.decisions[i].allowed) {
            if (id.empty()) {
                id.reserve(lease_prefix.size() + 20);
                id.append(lease_prefix);
                id += std::to_string(request_number);
            }
            out.slots.push_back({request_checks[i].key, id, l.lease});
            live_slots_.emplace(live_name(request_checks[i].key, id), out.slots.back());
            shortest = std::min(shortest, l.lease);
        }
    }
    if (!id.empty()) {
        schedule_renewal(shortest);
    }
}

std::string redis_store::live_name(std::string_view key, std::string_view lease_id) {
    std::string name;
    name.reserve(key.size() + 1 + lease_id.size());
    name.append(key);
    name.push_back('\0'); // never in a key: header values cannot hold it
    name.append(lease_id);
    return name;
}

std::size_t redis_store::wake_waiters(slot_waiters& waiters, std::string_view announcement) {
    const auto colon = announcement.find(':');
    if (colon == 0 || colon == std::string_view::npos || colon > 9) {
        return 0;
    }
    std::size_t count = 0;
    for (const char c : announcement.substr(0, colon)) {
        if (c < '0' || c > '9') {
            return 0;
        }
        count = count * 10 + static_cast<std::size_t>(c - '0');
    }
    const auto key = announcement.substr(colon + 1);
    std::size_t reached = 0;
    for (std::size_t i = 0; i < std::min(count, max_batch) && waiters.notify(key); ++i) {
        ++reached;
    }
    return reached;
}

std::string redis_store::slot_channel(const config::redis_settings& settings) {
    // Channels are shared by every database of a server: the number keeps them apart.
    return "sluice:slot-freed:" + std::to_string(settings.db);
}

void redis_store::post_flush(bool& posted, void (redis_store::*flush_pending)()) {
    if (posted) {
        return;
    }
    // What is handed over in one turn of the event loop goes in one script call, as the
    // requests decided in one turn do: a burst of responses ending together costs Redis one
    // call, not one per response.
    posted = true;
    net::post(ex_, [alive = std::weak_ptr(self_), flush_pending] {
        if (const auto self = alive.lock()) {
            ((*self)->*flush_pending)();
        }
    });
}

void redis_store::release(std::span<const slot> taken) noexcept {
    // Slots without a lease id came from the local fallback (failure-mode local).
    boost::container::small_vector<slot, 1> local;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& s : taken) {
        if (s.lease_id.empty()) {
            local.push_back(s);
            continue;
        }
        live_slots_.erase(live_name(s.key, s.lease_id));
        releasing_.push_back({s.key, s.lease_id, now + s.lease});
    }
    if (!local.empty() && local_fallback_ != nullptr) {
        local_fallback_->release(local);
    }
    if (!releasing_.empty()) {
        post_flush(release_posted_, &redis_store::flush_releases);
    }
}

void redis_store::settle(std::span<const settlement> adjustments) noexcept {
    // A reservation the local fallback decided is settled there: Redis never charged it.
    boost::container::small_vector<settlement, 1> local;
    for (const auto& a : adjustments) {
        if (a.local) {
            local.push_back(a);
            continue;
        }
        if (a.limit == nullptr || a.delta == 0 || !limiter::settles(a.limit->algo) ||
            (a.delta < 0 && !limiter::takes_refunds(*a.limit))) {
            continue; // nothing to adjust
        }
        queue_settlement(a.key, *a.limit, limiter::clamp_delta(a.delta), std::nullopt);
    }
    if (!local.empty() && local_fallback_ != nullptr) {
        local_fallback_->settle(local);
    }
    if (!settling_.empty()) {
        post_flush(settle_posted_, &redis_store::flush_settlements);
    }
}

void redis_store::give_back(std::span<const give_back_entry> charges) noexcept {
    for (const auto& g : charges) {
        if (g.limit == nullptr || g.limit->algo == config::algorithm::concurrency) {
            continue; // a slot goes back by `release`
        }
        queue_settlement(g.key, *g.limit, limiter::clamp_cost(g.amount), g.token);
    }
    if (!settling_.empty()) {
        post_flush(settle_posted_, &redis_store::flush_settlements);
    }
}

void redis_store::queue_settlement(const std::string& key,
                                   const config::limit& l,
                                   std::int64_t delta,
                                   std::optional<give_back_token> token) {
    // What the script needs of the limit, copied: the caller's config snapshot may be gone by
    // the flush.
    auto [p1, p2] = parameters(l);
    settling_.push_back(
        {key, algorithm_code(l.algo), std::move(p1), std::move(p2), delta, std::move(token)});
}

void redis_store::flush_settlements() {
    settle_posted_ = false;
    // Taken out first: a failure logged while sending must not find it half sent.
    auto sending = std::move(settling_);
    settling_.clear();
    const auto slot_of_item = [this](const pending_settlement& a) {
        return slot_of(a.key);
    };
    send_in_runs(sending, cluster_ != nullptr, slot_of_item, [this](auto slot, auto run) {
        const bool give_backs =
            std::any_of(run.begin(), run.end(), [](const pending_settlement& a) {
                return a.token.has_value();
            });
        run_script(slot,
                   redis::limits_script,
                   settlement_call_arguments(
                       std::span<const pending_settlement>(run), now_override_, ttl_),
                   give_backs ? "settle cost reservations or give back charges"
                              : "settle cost reservations",
                   give_backs ? "the adjustments are dropped, the charges lapse"
                              : "the adjustments are dropped");
    });
}

void redis_store::flush_releases() {
    release_posted_ = false;
    auto sending = std::move(releasing_);
    releasing_.clear();
    const auto slot_of_item = [this](const slot_release& r) {
        return slot_of(r.key);
    };
    send_in_runs(sending, cluster_ != nullptr, slot_of_item, [this](auto slot, auto run) {
        std::vector<std::string> args{std::to_string(run.size())};
        args.reserve(3 + 2 * run.size());
        for (const auto& r : run) {
            args.push_back(r.key);
        }
        args.emplace_back("release");
        args.push_back(channel_);
        for (const auto& r : run) {
            args.push_back(r.lease_id);
        }
        // Unanswered (Redis unreachable, or no reply in time): sent again once Redis answers.
        // An error reply: the slot lapses with its lease; limits stay safe, a waiter may wait
        // longer.
        run_script(slot,
                   redis::slots_script,
                   std::move(args),
                   "give back concurrency slots",
                   "they lapse with their lease, or go again once Redis answers",
                   [alive = std::weak_ptr(self_),
                    kept = std::vector<slot_release>(std::make_move_iterator(run.begin()),
                                                     std::make_move_iterator(run.end()))](
                       error_code ec) mutable {
                       const auto self = alive.lock();
                       if (self && ec != errc::bad_reply) {
                           (*self)->keep_unsent(std::move(kept));
                       }
                   });
    });
}

void redis_store::keep_unsent(std::vector<slot_release> run) {
    const auto now = std::chrono::steady_clock::now();
    for (auto& r : run) {
        if (r.lapses > now && unsent_releases_.size() < max_unsent_releases) {
            unsent_releases_.push_back(std::move(r));
        }
    }
}

void redis_store::requeue_unsent_releases() {
    const auto now = std::chrono::steady_clock::now();
    for (auto& r : unsent_releases_) {
        if (r.lapses > now) {
            releasing_.push_back(std::move(r));
        }
    }
    unsent_releases_.clear();
}

void redis_store::schedule_renewal(std::chrono::milliseconds lease) {
    if (stopped_) {
        return;
    }
    // Every slot is renewed each third of the shortest lease held: a renewal may be lost or
    // late once without the lease lapsing. A slot whose lease ends sooner than the armed wait
    // allows for brings the wait forward: waiting for a longer lease's third, its own would
    // lapse mid-request and its key admit one more than its limit.
    const auto due =
        std::chrono::steady_clock::now() + std::max(lease / 3, std::chrono::milliseconds{1});
    if (renewing_ && due >= renew_due_) {
        return;
    }
    renewing_ = true;
    renew_due_ = due;
    // Re-arming cancels the wait before, whose handler then returns at once.
    renew_timer_.expires_at(due);
    renew_timer_.async_wait([alive = std::weak_ptr(self_)](error_code ec) {
        const auto self = alive.lock();
        if (!self || ec) {
            return;
        }
        auto& owner = **self;
        owner.renewing_ = false;
        owner.renew_all();
        auto shortest = std::chrono::milliseconds::max();
        for (const auto& [name, s] : owner.live_slots_) {
            shortest = std::min(shortest, s.lease);
        }
        if (!owner.live_slots_.empty()) {
            owner.schedule_renewal(shortest);
        }
    });
}

void redis_store::renew_all() {
    // In calls of at most max_batch slots, as everything else sent: a worker holding thousands
    // of slots must not make one call that keeps Redis busy for long.
    std::vector<const slot*> held;
    held.reserve(live_slots_.size());
    for (const auto& [name, s] : live_slots_) {
        held.push_back(&s);
    }
    const auto slot_of_item = [this](const slot* s) {
        return slot_of(s->key);
    };
    send_in_runs(held, cluster_ != nullptr, slot_of_item, [this](auto cluster_slot, auto run) {
        std::vector<std::string> args{std::to_string(run.size())};
        args.reserve(3 + 3 * run.size());
        for (const slot* s : run) {
            args.push_back(s->key);
        }
        args.emplace_back("renew");
        args.push_back(now_override_ ? format_double(*now_override_) : std::string());
        for (const slot* s : run) {
            args.push_back(s->lease_id);
            args.push_back(std::to_string(s->lease.count()));
        }
        run_script(cluster_slot,
                   redis::slots_script,
                   std::move(args),
                   "renew concurrency slots",
                   "they lapse with their lease");
    });
}

} // namespace sluice::store
