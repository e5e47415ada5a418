// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/redis_store.hpp"

#include "sluice/core/log_excerpt.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/redis/scripts.hpp"
#include "store/limits_call.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string_view>

// The store's acquisitions: batches of requests, one script call in flight per slot, the reply
// decoded into each request's outcome. What naming and loading the scripts takes is in
// redis_store_scripts.cpp; what an outcome gives back afterwards (CONCURRENCY slots, cost
// settlements, Cluster give-backs) in redis_store_charges.cpp; the call's bytes in
// limits_call.cpp. What is left here is one mechanism, batching and its calls in flight, read
// from a request's arrival (`enqueue`) to its outcome (`answer`).

namespace sluice::store {

using limits_call::admitted;
using limits_call::decisions_at;
using limits_call::definition_texts;
using limits_call::delays_within_bounds;
using limits_call::give_backs_at;
using limits_call::reply_fields;
using limits_call::token_fields;
using limits_call::well_formed;
using limits_call::write_decide_call;

namespace {

using std::chrono::milliseconds;

// A prefix no other store shares, in this process or another: 64 random bits. Built once per
// store, at start-up.
std::string make_lease_prefix() {
    std::random_device source;
    const std::uint64_t bits = (std::uint64_t{source()} << 32) | source();
    char text[24];
    const int n =
        std::snprintf(text, sizeof text, "%016llx:", static_cast<unsigned long long>(bits));
    return std::string(text, static_cast<std::size_t>(std::max(n, 0)));
}

// The open batches and the calls in flight, per slot: an entry only while a slot has one,
// one slot in all without Cluster, so a linear search.
template <typename Batch>
std::uint16_t entry_slot(const std::shared_ptr<Batch>& b) {
    return b->slot;
}

std::uint16_t entry_slot(const std::pair<std::uint16_t, std::size_t>& calls) {
    return calls.first;
}

template <typename Entries>
auto entry_of(Entries& entries, std::uint16_t slot) {
    return std::find_if(
        entries.begin(), entries.end(), [slot](const auto& e) { return entry_slot(e) == slot; });
}

} // namespace

/// A request waiting for its batch's reply. Its checks and the place for its outcome are its
/// coroutine's, alive as long as `handler` (which owns the coroutine's frame) is: the handler
/// leaves the waiter only to be called, once the outcome is written.
struct redis_store::batch_waiter {
    const checks* request_checks = nullptr;
    outcome* out = nullptr;
    net::any_completion_handler<void()> handler;
    /// Set for a tentative request: receives its give-back entries before `handler` runs.
    std::shared_ptr<std::vector<give_back_entry>> give_backs;
    /// A part of a request split across slots: a failure completes it with the error.
    bool part = false;
};

/// Requests sharing one script call, and the call's arguments once it is built.
struct redis_store::batch {
    using waiter = batch_waiter;

    /// The Cluster slot of every key of this batch's requests (0 without Cluster).
    std::uint16_t slot = 0;

    std::vector<waiter> waiters;
    /// The reply's size in bytes (write_decide_call's).
    std::size_t reply_size = 0;
    /// The script call in RESP (see `format`).
    std::string command;
    std::chrono::steady_clock::time_point sent;
    /// How the call names the script (FCALL first, then the fallbacks a refusal leads to).
    redis::script_call how = redis::script_call::fcall;
    /// Unique to this batch: its i-th request's slots are leased as `<lease_prefix><i>`.
    std::string lease_prefix;

    /// Writes `command`, the script call deciding this batch (limits_call::write_decide_call),
    /// with `verb` and `script` its first two arguments (`redis::script_call_head`).
    void format(std::string_view verb,
                std::string_view script,
                std::optional<double> now,
                milliseconds ttl,
                definition_texts& texts) {
        reply_size =
            write_decide_call(command, verb, script, waiters, now, ttl, texts, lease_prefix);
    }
};

namespace {

// The outcome of a request that was not decided at all: `ec`, no decisions.
outcome undecided(error_code ec) {
    outcome out;
    out.ec = ec;
    return out;
}

// Resumes a waiting request with its outcome, written where the request waits for it. Called
// directly, not dispatched: the store runs on the thread of the requests it serves (see the
// header), where dispatch would run it inline anyway.
void resume(net::any_completion_handler<void()>& handler, outcome& place, outcome&& out) {
    place = std::move(out);
    std::move(handler)();
}

// Registers the scripts' loads as the connection's connect commands.
void load_scripts(auto& connection) {
    connection.add_connect_command({"SCRIPT", "LOAD", std::string(redis::limits_script.text)});
    connection.add_connect_command({"SCRIPT", "LOAD", std::string(redis::slots_script.text)});
    // Refused when the library is there already (loaded by another connection), and by a Redis
    // before 7 or an ACL: the first FCALL tells which (see `retry_as`).
    connection.add_connect_command({"FUNCTION", "LOAD", std::string(redis::limits_script.library)},
                                   redis::if_refused::carry_on);
}

} // namespace

redis_store::redis_store(unconnected,
                         executor ex,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : ex_(std::move(ex))
    , ttl_(settings.ttl)
    , on_failure_(settings.on_failure)
    , local_fallback_(local_fallback)
    , definitions_(std::make_unique<definition_texts>())
    , self_(std::make_shared<redis_store*>(this))
    , channel_(slot_channel(settings))
    , lease_prefix_(make_lease_prefix())
    , renew_timer_(ex_) {}

redis_store::redis_store(redis::client& client,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : redis_store(unconnected{}, client.get_executor(), settings, local_fallback) {
    client_ = &client;
    load_scripts(client);
}

redis_store::redis_store(redis::cluster_client& cluster,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : redis_store(unconnected{}, cluster.get_executor(), settings, local_fallback) {
    cluster_ = &cluster;
    load_scripts(cluster);
}

redis_store::redis_store(executor ex,
                         const config::redis_settings& settings,
                         memory_store* local_fallback,
                         std::atomic<std::uint64_t>* lookup_failures)
    : redis_store(unconnected{}, ex, settings, local_fallback) {
    if (settings.topology == config::redis_topology::cluster) {
        auto options = redis::cluster_options::from_settings(settings);
        options.node.lookup_failures = lookup_failures;
        owned_cluster_ = std::make_unique<redis::cluster_client>(std::move(ex), std::move(options));
        cluster_ = owned_cluster_.get();
        load_scripts(*cluster_);
        cluster_->start();
        return;
    }
    auto options = redis::client_options::from_settings(settings);
    options.lookup_failures = lookup_failures;
    owned_client_ = std::make_unique<redis::client>(std::move(ex), std::move(options));
    client_ = owned_client_.get();
    load_scripts(*client_);
    client_->start();
}

redis_store::~redis_store() {
    // Requests still waiting for a flush would never be resumed: end them as unavailable.
    for (auto& b : open_) {
        for (auto& w : b->waiters) {
            *w.out = undecided(errc::redis_unavailable);
            net::post(ex_, std::move(w.handler));
        }
    }
}

void redis_store::set_metrics(metrics::registry* registry) {
    metrics_ = registry;
    if (cluster_ == nullptr || registry == nullptr) {
        return;
    }
    redis::cluster_observer o;
    o.moved = &registry->redis_moved_total;
    o.ask = &registry->redis_ask_total;
    o.tryagain = &registry->redis_tryagain_total;
    o.map_changed = &registry->redis_map_changed_total;
    o.map_unchanged = &registry->redis_map_unchanged_total;
    o.map_failed = &registry->redis_map_failed_total;
    o.failovers = &registry->redis_failovers_total;
    o.calls_to = [registry](const std::string& node) {
        return &registry->redis_node_calls(node);
    };
    cluster_->set_observer(std::move(o));
}

bool redis_store::connected() const noexcept {
    return cluster_ != nullptr ? cluster_->healthy() : client_->connected();
}

std::uint16_t redis_store::slot_of(std::string_view key) const noexcept {
    return cluster_ != nullptr ? redis::key_slot(key) : 0;
}

void redis_store::call(std::uint16_t slot,
                       std::string_view command,
                       redis::client::handler_type handler) {
    if (cluster_ != nullptr) {
        cluster_->async_formatted(slot, command, std::move(handler));
    } else {
        client_->async_formatted(command, std::move(handler));
    }
}

awaitable<outcome> redis_store::acquire(checks request_checks) {
    outcome out;
    co_await acquire_into(request_checks, out);
    co_return out;
}

awaitable<void> redis_store::acquire_into(const checks& request_checks, outcome& out) {
    // Not a coroutine: the request's own coroutine waits for the batch's reply directly, and
    // the reply is decoded into `out` where it waits. Moving the checks into the batch and the
    // outcome back out through Asio's handlers (an any_completion_handler<void(outcome)>, the
    // awaitable's result, the caller's copy) cost 0.7k instructions a request.
    net::use_awaitable_t<io_executor> token;
    return net::async_initiate<net::use_awaitable_t<io_executor>, void()>(
        [this, &request_checks, &out](auto handler) {
            if (request_checks.empty()) {
                out = outcome{};
                net::post(ex_, std::move(handler));
                return;
            }
            enqueue(request_checks, out, std::move(handler));
        },
        token);
}

awaitable<redis_store::tentative_outcome>
redis_store::acquire_tentative_for_test(checks request_checks) {
    if (request_checks.empty()) {
        co_return tentative_outcome{};
    }
    auto give_backs = std::make_shared<std::vector<give_back_entry>>();
    outcome decided;
    auto initiate = [this, &request_checks, &decided, give_backs](auto handler) {
        enqueue(request_checks, decided, std::move(handler), give_backs);
    };
    net::use_awaitable_t<io_executor> token;
    co_await net::async_initiate<net::use_awaitable_t<io_executor>, void()>(std::move(initiate),
                                                                            token);
    co_return tentative_outcome{std::move(decided), std::move(*give_backs)};
}

void redis_store::enqueue(const checks& request_checks,
                          outcome& out,
                          net::any_completion_handler<void()> handler,
                          std::shared_ptr<std::vector<give_back_entry>> give_backs) {
    const auto slot = slot_of(request_checks.front().key);
    if (cluster_ != nullptr && !give_backs &&
        std::any_of(request_checks.begin() + 1, request_checks.end(), [&](const check& c) {
            return redis::key_slot(c.key) != slot;
        })) {
        split(request_checks, out, std::move(handler));
        return;
    }
    add_to_batch(slot, request_checks, out, std::move(handler), std::move(give_backs), false);
}

void redis_store::add_to_batch(std::uint16_t slot,
                               const checks& request_checks,
                               outcome& out,
                               net::any_completion_handler<void()> handler,
                               std::shared_ptr<std::vector<give_back_entry>> give_backs,
                               bool part) {
    auto open = entry_of(open_, slot);
    if (open == open_.end()) {
        open_.push_back(std::make_shared<batch>());
        open_.back()->slot = slot;
        // The vector of a batch already answered, with room for as many as the last batch
        // held: the next is most often as large. Growing it anew moved each request's waiter
        // once more, and its allocations (some KiB) came from malloc's slow path.
        open_.back()->waiters.swap(spare_waiters_);
        open_.back()->waiters.reserve(last_batch_size_);
        open = open_.end() - 1;
    }
    if (!flush_posted_ && calls_in_flight(slot) == 0) {
        // The flush runs after the handlers that are ready now: the requests they read join.
        // (With a call in flight, its reply sends the batch: see `call_answered`.)
        flush_posted_ = true;
        net::post(ex_, [alive = std::weak_ptr(self_)] {
            if (const auto self = alive.lock()) {
                (*self)->flush();
            }
        });
    }
    auto& b = **open;
    b.waiters.emplace_back(&request_checks, &out, std::move(handler), std::move(give_backs), part);
    if (b.waiters.size() >= max_batch) {
        auto full = std::move(*open);
        open_.erase(open);
        flush_batch(std::move(full));
    }
}

/// A request split across Cluster slots, until every part is decided. Its checks and the place
/// for its outcome are the waiting coroutine's, alive as long as `handler` is.
struct redis_store::joint {
    struct part {
        std::uint16_t slot = 0;
        /// The request's checks on this slot, in their order, and where each came from.
        checks part_checks;
        boost::container::small_vector<std::size_t, 2> indices;
        outcome decided;
        std::shared_ptr<std::vector<give_back_entry>> give_backs =
            std::make_shared<std::vector<give_back_entry>>();
    };

    // Move-constructed: Boost 1.81's any_completion_handler assignment wraps the handler in
    // another one instead of moving it.
    joint(const checks& c, outcome& o, net::any_completion_handler<void()> h)
        : request_checks(c)
        , out(o)
        , handler(std::move(h)) {}

    const checks& request_checks;
    outcome& out;
    net::any_completion_handler<void()> handler;
    boost::container::small_vector<part, 2> parts;
    std::size_t waiting = 0;
};

void redis_store::split(const checks& request_checks,
                        outcome& out,
                        net::any_completion_handler<void()> handler) {
    auto j = std::make_shared<joint>(request_checks, out, std::move(handler));
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        const auto slot = redis::key_slot(request_checks[i].key);
        auto p = std::find_if(j->parts.begin(), j->parts.end(), [slot](const joint::part& x) {
            return x.slot == slot;
        });
        if (p == j->parts.end()) {
            j->parts.emplace_back();
            p = j->parts.end() - 1;
            p->slot = slot;
        }
        p->part_checks.push_back(request_checks[i]);
        p->indices.push_back(i);
    }
    j->waiting = j->parts.size();
    // Every part is in place before the first is enqueued: its checks and outcome are pointed
    // to, and `parts` must not grow after.
    for (auto& p : j->parts) {
        net::any_completion_handler<void()> on_part = [alive = std::weak_ptr(self_), j]() {
            if (--j->waiting > 0) {
                return;
            }
            if (const auto self = alive.lock()) {
                (*self)->finish_joint(*j);
                return;
            }
            resume(j->handler, j->out, undecided(errc::redis_unavailable));
        };
        add_to_batch(p.slot, p.part_checks, p.decided, std::move(on_part), p.give_backs, true);
    }
}

void redis_store::finish_joint(joint& j) {
    error_code ec;
    for (const auto& p : j.parts) {
        ec = ec ? ec : p.decided.ec;
    }
    // What the parts that admitted took goes back when the request is not admitted as a whole:
    // their slots always (a request the failure mode decides holds none), their charges unless
    // `open` forwards the request anyway. A part without an answer is never given back: it may
    // not have charged, and returning a charge never made would admit more than the limit.
    const auto give_back_admitted = [&](bool charges) {
        bool any = false;
        for (auto& p : j.parts) {
            if (p.decided.ec || !admitted(p.part_checks, p.decided)) {
                continue;
            }
            release(p.decided.slots);
            if (charges) {
                give_back(*p.give_backs);
                any = any || !p.give_backs->empty() || !p.decided.slots.empty();
            }
        }
        if (any) {
            give_backs_sent_.fetch_add(1, std::memory_order_relaxed);
            if (metrics_ != nullptr) {
                metrics::bump(metrics_->redis_give_backs_total);
            }
        }
    };
    if (ec) {
        give_back_admitted(on_failure_ != config::failure_mode::open);
        resume(j.handler, j.out, fail(j.request_checks, ec));
        return;
    }
    outcome out;
    out.decisions.resize(j.request_checks.size());
    for (auto& p : j.parts) {
        for (std::size_t k = 0; k < p.indices.size(); ++k) {
            out.decisions[p.indices[k]] = p.decided.decisions[k];
        }
    }
    if (!admitted(j.request_checks, out)) {
        give_back_admitted(true);
        resume(j.handler, j.out, std::move(out));
        return;
    }
    for (auto& p : j.parts) {
        for (auto& taken : p.decided.slots) {
            out.slots.push_back(std::move(taken));
        }
    }
    resume(j.handler, j.out, std::move(out));
}

void redis_store::flush() {
    flush_posted_ = false;
    auto batches = std::move(open_); // leaves open_ empty: the next request opens a new batch
    open_.clear();
    for (auto& b : batches) {
        if (calls_in_flight(b->slot) > 0) {
            open_.push_back(std::move(b)); // held until the reply: see `call_answered`
            continue;
        }
        flush_batch(std::move(b));
    }
}

std::size_t redis_store::calls_in_flight(std::uint16_t slot) const noexcept {
    const auto it = entry_of(in_flight_, slot);
    return it == in_flight_.end() ? 0 : it->second;
}

redis_store::batch_ptr redis_store::call_answered(std::uint16_t slot, error_code ec) {
    const auto it = entry_of(in_flight_, slot);
    if (it != in_flight_.end() && --it->second == 0) {
        in_flight_.erase(it);
    }
    // Every request held came after the call that timed out was sent: failing them with it
    // keeps each within its own `timeout`, where sending them would give them one more.
    const bool fail_along = ec == errc::redis_timeout;
    const auto open = entry_of(open_, slot);
    if (open == open_.end() || (!fail_along && calls_in_flight(slot) > 0)) {
        return nullptr;
    }
    auto held = std::move(*open);
    open_.erase(open);
    if (fail_along) {
        return held;
    }
    flush_batch(std::move(held));
    return nullptr;
}

void redis_store::flush_batch(batch_ptr b) {
    last_batch_size_ = b->waiters.size();
    const auto it = entry_of(in_flight_, b->slot);
    if (it == in_flight_.end()) {
        in_flight_.emplace_back(b->slot, 1);
    } else {
        ++it->second;
    }
    b->lease_prefix = lease_prefix_ + std::to_string(++batches_) + ':';
    b->how = first_call(redis::limits_script);
    const auto [verb, script] = redis::script_call_head(b->how, redis::limits_script);
    b->format(verb, script, now_override_, ttl_, *definitions_);
    send(std::move(b));
}

void redis_store::send(batch_ptr b) {
    b->sent = std::chrono::steady_clock::now();
    const auto slot = b->slot;
    const std::string_view command = b->command;
    call(slot, command, [alive = std::weak_ptr(self_), b](error_code ec, redis::reply r) mutable {
        const auto self = alive.lock();
        if (!self) {
            for (auto& w : b->waiters) {
                resume(w.handler, *w.out, undecided(errc::redis_unavailable));
            }
            return;
        }
        auto& owner = **self;
        if (owner.metrics_ != nullptr) {
            owner.metrics_->redis_latency.observe(std::chrono::steady_clock::now() - b->sent);
        }
        if (const auto next = owner.retry_as(b->slot, b->how, r)) {
            // Redis does not know the script by this name: the same batch, named the next way.
            b->how = *next;
            const auto [verb, script] = redis::script_call_head(b->how, redis::limits_script);
            b->format(verb, script, owner.now_override_, owner.ttl_, *owner.definitions_);
            owner.send(std::move(b));
            return;
        }
        // The batch held behind this call is sent first, so that Redis decides it while this
        // one's requests are resumed; after a timeout it fails, after them.
        const auto failed_along = owner.call_answered(b->slot, ec);
        owner.complete(*b, ec, r);
        if (failed_along) {
            owner.complete(*failed_along, ec, redis::reply{});
        }
    });
}

void redis_store::complete(batch& b, error_code ec, const redis::reply& r) {
    answer(b, ec, r);
    if (exiting_) {
        give_back_live_slots(); // taken by a batch answered after the give-back
        drop_exit_hold_when_idle();
    }
    // Kept for the next batch: only the largest, so that one outsized batch is all it holds.
    b.waiters.clear();
    if (b.waiters.capacity() > spare_waiters_.capacity()) {
        spare_waiters_.swap(b.waiters);
    }
}

void redis_store::answer(batch& b, error_code ec, const redis::reply& r) {
    if (!ec && !well_formed(r, b.reply_size)) {
        ec = errc::bad_reply;
    }
    if (ec) {
        if (metrics_ != nullptr) {
            metrics::bump(ec == errc::redis_timeout ? metrics_->redis_timeouts_total
                                                    : metrics_->redis_errors_total);
        }
        // Unavailability is the client's to report (once per outage); a bad reply is a bug or
        // a misconfiguration an operator must see, but not once per request (nor per worker
        // more than once per interval: each store, a worker's, has its own). An error reply:
        // each kind (OOM, BUSY, ERR, ...) once per 10 s, so one does not hide another, with its
        // count; by kind, not by text, which may differ every time (a number, a key, a line)
        // and would give each reply a line. A malformed one: one line per 10 s in all. Either
        // shows at most 128 bytes of the reply: a reply may be as large as Redis allows.
        if (ec == errc::bad_reply && r.is_error()) {
            log_throttled_by(script_errors_,
                             r.error_kind(),
                             spdlog::level::warn,
                             "redis store: the limits script failed: {}",
                             log_excerpt(r.str));
        } else if (ec == errc::bad_reply) {
            log_throttled(malformed_replies_,
                          spdlog::level::warn,
                          "redis store: unexpected reply to the limits script: {}",
                          log_excerpt(r.describe(log_excerpt_bytes)));
        }
        release_slots_of_failed(b);
        for (auto& w : b.waiters) {
            if (w.part) {
                resume(w.handler, *w.out, undecided(ec));
                continue;
            }
            resume(w.handler, *w.out, fail(*w.request_checks, ec));
        }
        return;
    }
    if (!unsent_releases_.empty()) {
        requeue_unsent_releases(); // Redis answers again
        post_flush(release_posted_, &redis_store::flush_releases);
    }
    std::size_t field = 0;
    std::size_t request_number = 0;
    for (auto& w : b.waiters) {
        const auto& request_checks = *w.request_checks;
        auto& out = *w.out;
        const std::size_t stride = w.give_backs ? reply_fields + token_fields : reply_fields;
        ++request_number;
        if (!delays_within_bounds(r.str, field, request_checks, stride)) {
            field += request_checks.size() * stride;
            refuse_delay(b, w, request_number);
            continue;
        }
        decisions_at(r.str, field, request_checks, stride, out);
        if (w.give_backs) {
            *w.give_backs = give_backs_at(r.str, field, request_checks, out, stride);
        }
        field += request_checks.size() * stride;
        take_slots(request_checks, out, b.lease_prefix, request_number);
        std::move(w.handler)();
    }
}

void redis_store::release_slots_of_failed(const batch& b) {
    // A batch failed along with the call it was held behind (a timeout) was never sent, so the
    // script took nothing for it; nor has it a lease prefix (flush_batch gives it one), and its
    // releases would name leases "1", "2", ...: script calls for nothing.
    if (b.lease_prefix.empty()) {
        return;
    }
    std::size_t request_number = 0;
    for (const auto& w : b.waiters) {
        queue_release_of_slots(*w.request_checks, b.lease_prefix, ++request_number);
    }
}

void redis_store::queue_release_of_slots(const checks& request_checks,
                                         std::string_view lease_prefix,
                                         std::size_t request_number) {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& c : request_checks) {
        if (c.limit->algo == config::algorithm::concurrency) {
            // Named as take_slots would have named it.
            releasing_.push_back({c.key,
                                  std::string(lease_prefix) + std::to_string(request_number),
                                  now + c.limit->lease});
        }
    }
    if (!releasing_.empty()) {
        post_flush(release_posted_, &redis_store::flush_releases);
    }
}

void redis_store::refuse_delay(const batch& b, batch_waiter& w, std::size_t request_number) {
    if (metrics_ != nullptr) {
        metrics::bump(metrics_->redis_errors_total);
    }
    log_throttled(malformed_replies_,
                  spdlog::level::warn,
                  "redis store: the limits script gave a delay beyond its limit's bound: the "
                  "state of {} is not what sluice writes; that request follows the failure mode",
                  w.request_checks->empty() ? std::string{}
                                            : log_excerpt(w.request_checks->front().key));
    queue_release_of_slots(*w.request_checks, b.lease_prefix, request_number);
    if (w.part) {
        resume(w.handler, *w.out, undecided(errc::bad_reply));
        return;
    }
    resume(w.handler, *w.out, fail(*w.request_checks, errc::bad_reply));
}

namespace {

// Runs its function when the last call holding it is done with (answered, failed, or dropped
// with its store): what give_back_before_exit waits for.
struct exit_wait {
    std::function<void()> answered;

    explicit exit_wait(std::function<void()> f)
        : answered(std::move(f)) {}

    exit_wait(const exit_wait&) = delete;
    exit_wait& operator=(const exit_wait&) = delete;

    ~exit_wait() {
        try {
            answered();
        } catch (...) { // it posts, which allocates: the control thread's bound ends the wait
        }
    }
};

} // namespace

void redis_store::give_back_before_exit(std::function<void()> answered) {
    exiting_ = true;
    exit_hold_ = std::make_shared<exit_wait>(std::move(answered));
    give_back_live_slots();
    flush_settlements();
    drop_exit_hold_when_idle();
}

void redis_store::give_back_live_slots() {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [name, s] : live_slots_) {
        releasing_.push_back({s.key, s.lease_id, now + s.lease});
    }
    live_slots_.clear();
    requeue_unsent_releases();
    flush_releases();
}

void redis_store::drop_exit_hold_when_idle() {
    // A batch in flight may yet take slots (its reply comes after the give-back): the hold is
    // kept until it is answered, and what it took goes back then (`complete`).
    if (in_flight_.empty()) {
        exit_hold_.reset();
    }
}

void redis_store::stop() {
    requeue_unsent_releases();
    flush_releases();
    flush_settlements();
    stopped_ = true;
    renew_timer_.cancel();
    if (cluster_ != nullptr) {
        cluster_->stop();
    } else {
        client_->stop();
    }
}

void redis_store::apply_reloadable(const config::redis_settings& settings) noexcept {
    ttl_ = settings.ttl;
    on_failure_ = settings.on_failure;
}

outcome redis_store::fail(const checks& request_checks, error_code ec) {
    if (metrics_ != nullptr) {
        metrics::bump(metrics_->store_errors_total);
    }
    if (on_failure_ == config::failure_mode::local && local_fallback_ != nullptr) {
        auto out = local_fallback_->acquire_now(request_checks);
        out.local = true;
        return out;
    }
    return undecided(ec);
}

std::unique_ptr<store> make_redis_store(executor ex,
                                        const config::redis_settings& settings,
                                        memory_store* local_fallback) {
    return std::make_unique<redis_store>(std::move(ex), settings, local_fallback);
}

} // namespace sluice::store
