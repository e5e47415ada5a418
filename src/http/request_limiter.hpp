// SPDX-License-Identifier: Apache-2.0
#pragma once

// The limiter's side of one request, in one object (the shape of Envoy's local rate-limit
// filter): built from the config snapshot and the request, it owns the request's checks and
// the store's outcome, decides in one step, and says what the response, the counters and the
// access log need of that decision. The session only asks it.

#include "http/local_reply.hpp"
#include "sluice/http/verdict.hpp"
#include "sluice/http/worker_context.hpp"
#include "sluice/key/cidr.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/store/store.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::http::detail {

/// Counts a request in the global number of held requests for as long as it lives.
class held_count {
public:
    explicit held_count(std::atomic<std::int64_t>& counter) noexcept
        : counter_(&counter)
        , before_(counter.fetch_add(1, std::memory_order_relaxed)) {}

    held_count(const held_count&) = delete;
    held_count& operator=(const held_count&) = delete;

    /// The count goes with the request's record while it is held without its memory
    /// (`request_limiter::suspend`).
    held_count(held_count&& other) noexcept
        : counter_(std::exchange(other.counter_, nullptr))
        , before_(other.before_) {}

    ~held_count() { release(); }

    /// How many were held before this one.
    std::int64_t before() const noexcept { return before_; }

    void release() noexcept {
        if (counter_ != nullptr) {
            counter_->fetch_sub(1, std::memory_order_relaxed);
            counter_ = nullptr;
        }
    }

private:
    std::atomic<std::int64_t>* counter_;
    std::int64_t before_;
};

/**
 * What the limiter of a request held by shaping keeps while the request waits without its
 * coroutine and its memory (`request_limiter::suspend`): what the store decided (the decisions,
 * the CONCURRENCY slots taken), the verdict, the request's place among the held, and how the
 * request was counted. `resume` derives the rest again from the request, as `try_now` did:
 * the rule, the keys, the costs and what settles them.
 */
struct held_decision {
    held_decision() = default;
    held_decision(held_decision&&) noexcept = default;
    held_decision& operator=(held_decision&&) = delete;

    /// Gives back the slots no limiter took back (`request_limiter::resume`): a held request
    /// dropped before it was made again gives back what it took, whatever dropped it.
    ~held_decision() {
        if (!slots.empty() && store != nullptr) {
            store->release(slots);
            if (in_flight != nullptr) {
                in_flight->fetch_sub(static_cast<std::int64_t>(slots.size()),
                                     std::memory_order_relaxed);
            }
        }
    }

    std::vector<limiter::decision> decisions;
    /// The CONCURRENCY slots taken, and the store they are to go back to.
    std::vector<store::slot> slots;
    store::store* store = nullptr;
    bool local = false;
    verdict v;
    std::optional<held_count> held;
    metrics::gauge* in_flight = nullptr;
    metrics::rule_counters* cost_counters = nullptr;
    std::optional<metrics::decision_kind> counted_as;
    std::string_view word;
    bool waited = false;
    bool dry_run_rejected = false;
    /// When the store decided (rate_limit_context::decided_at).
    coarse_clock::time_point decided_at{};
};

/// The request as the limiter sees it.
struct limited_request {
    const request_parser::value_type& message;
    /// The normalized path (key::normalize_path).
    std::string_view path;
    /// The connection's peer.
    const key::ip_address& peer;
    /// The body read ahead of the decision (`request_limiter::body_wanted`), and whether that
    /// is all of it: a `json:` field is looked for only in a whole body.
    std::string_view body = {};
    bool body_complete = false;
    /// `peer` as text (`ip_address::to_string`), made once per connection; empty: not made.
    std::string_view peer_text = {};
};

class request_limiter {
public:
    request_limiter() = default;
    request_limiter(const request_limiter&) = delete;
    request_limiter& operator=(const request_limiter&) = delete;

    /// Gives back the CONCURRENCY slots the request holds: its response is over; settles its
    /// reservations as responses without a figure, unless `settle_costs` did already.
    ~request_limiter() {
        release_slots();
        settle_costs({}, false);
    }

    /**
     * Finds the rule that decides the request and says how much of its body to read before
     * `try_now`: 0 when none of its limits looks into a JSON body (a `json:` key part or
     * `cost.request`), otherwise the largest `cost.max-body` among those that do.
     */
    std::uint64_t body_wanted(const config::config& cfg, const limited_request& req);

    /**
     * Finds the rule (unless `body_wanted` did) and says whether the request carries a header
     * one of its limits reads (a `header:` key part, a `cost.request` header) on more than one
     * line. Such a request is refused (400): which line counts would be a guess, and an upstream
     * guessing otherwise would let a client rotate the line the limit reads and escape it.
     */
    bool repeats_a_header_it_reads(const config::config& cfg, const limited_request& req);

    /**
     * Finds the rule (unless `body_wanted` did), derives the store keys, takes a place among the
     * held requests when a limit may hold the request (`rate-limit.max-held`, checked before
     * anything is charged), and has the store decide at once when it can. True: decided, or nothing
     * to decide. False: co_await `store_decision`. `cfg` (the request's snapshot) and `w`
     * outlive the limiter.
     */
    bool try_now(worker_context& w, const config::config& cfg, const limited_request& req);

    /**
     * After a wait for a slot (`verdict::kind::queued`): decides the request again, as
     * `try_now` but without joining the line of waiters first (the request is in it).
     */
    bool try_again(worker_context& w, const limited_request& req);

    /// A queued request that waited its `max-delay` without a slot: refused, naming the limit.
    void give_up() noexcept;

    /// A held or queued request a drain answers 503 (request_handler.cpp `answer_drained`):
    /// logged as "drained", counted as delayed as it was; its place among the held given back.
    void drained() noexcept;

    /// queued: the key of the slot to wait for, its limit, and when waiting ends (nullopt:
    /// never, though `rate-limit.max-held` and the client still bound it).
    std::string_view wait_key() const noexcept;
    const config::limit* wait_limit() const noexcept;

    /// Gives back the request's slots now (idempotent).
    void release_slots() noexcept;

    /// Where the figures that settle the request's reservations are in its response (a header
    /// or trailer, a JSON field), one per cost-weighted limit with a `cost.response` source;
    /// empty when there is none.
    std::span<const config::cost_source* const> settle_sources() const noexcept {
        return settle_sources_;
    }

    /// The most of the response body to keep aside for the `json:` sources among them.
    std::uint64_t response_json_bytes() const noexcept { return response_json_bytes_; }

    /**
     * Settles, once, the reservations of an admitted request's cost-weighted limits, when its
     * response is over: `figures` holds the figures of `settle_sources()` found in the response
     * (nullopt: absent), `usable` is false when the response can carry no honest figure (none
     * came, a 5xx, cut short). Each limit is adjusted by `actual - reserved`, or, without a
     * usable figure, by `-reserved` (`on-missing: refund`) or not at all (`keep`). Never blocks:
     * the store sends it on.
     */
    void settle_costs(std::span<const std::optional<std::string>> figures, bool usable) noexcept;

    /**
     * What `try_now` or `try_again` could not decide at once: the store's decision, to co_await
     * at once, then `settle_store_decision`. The store reads the checks and writes its outcome
     * in place (`store::acquire_into`), so the awaiting frame holds nothing of either; not a
     * coroutine of its own (one cost a frame, 0.2k instructions a request).
     */
    awaitable<void> store_decision() { return store_->acquire_into(pending_, outcome_); }

    /// Turns the outcome `store_decision` wrote into the verdict.
    void settle_store_decision();

    const verdict& result() const noexcept { return v_; }

    /// Refused because `rate-limit.max-held` was reached, not by a limit: a 503.
    bool overloaded() const noexcept { return overloaded_; }

    /// The answer to a refused request: 429 naming the refusing limit, or 503 when the store
    /// failed closed or the held requests are at their cap.
    local_reply refusal() const;

    /// The rate-limit fields the response carries (none when no limit applied).
    rate_limit_context response_fields() const noexcept { return fields_; }

    /// Holds the request's place among the held requests while it waits: taken now if
    /// `try_now` did not, given back by `end_hold`.
    void begin_hold(worker_context& w);

    void end_hold() noexcept { held_.reset(); }

    /**
     * A delayed request (`begin_hold` done) gives up its memory for the hold: what its limiter
     * must keep, moved out. The limiter is left with nothing to give back or settle.
     */
    held_decision suspend();

    /**
     * The limiter of a request `suspend` took the decision of, made again from the same request
     * (parsed again from the same bytes) and snapshot: the rule, keys and costs derived as
     * `try_now` derived them (nothing decided nor counted again), the decision restored.
     */
    void resume(worker_context& w,
                const config::config& cfg,
                const limited_request& req,
                held_decision&& held);

    /// What the access log says of the decision: the client address the request was limited
    /// by (empty unless `logging.access-log`), its first key, and the decision's word.
    const std::string& client() const noexcept { return client_; }

    std::string_view first_key() const noexcept;

    std::string_view decision_word() const noexcept { return word_; }

    /// The rule's name ("fallback" when none matched), for the per-rule counters.
    std::string_view rule_name() const noexcept { return rule_name_; }

    /// What the request counts as; nullopt when it never reached the limiter. A request a
    /// dry-run limit would have refused, but that went upstream, counts as dry_run_rejected.
    std::optional<metrics::decision_kind> counted_as() const noexcept;

private:
    void select_rule(const config::config& cfg, const limited_request& req);
    void derive_checks(const config::config& cfg, const limited_request& req);
    void reserve_hold(worker_context& w);
    /// A request that arrives while others wait for a slot of one of its keys joins the line
    /// rather than taking a slot first; refused, undecided, when the line is full
    /// (`max-waiting`) or no request may wait (`max-held`). True when it did either.
    bool join_line(worker_context& w);
    bool decide_now(worker_context& w);
    /// Turns the store's outcome, in `outcome_`, into the verdict.
    void settle();
    void count_reservations();

    const config::config* cfg_ = nullptr;
    /// select_rule ran: rule_, rule_name_ and limits_ are this request's.
    bool selected_ = false;
    const config::rule* rule_ = nullptr;
    std::string_view rule_name_;
    std::span<const config::limit> limits_;
    store::checks pending_;
    std::string first_key_;
    std::string client_;
    store::outcome outcome_;
    verdict v_;
    rate_limit_context fields_;
    std::string_view word_ = "-";
    /// The store that gave `slots_`, and the slots to give back.
    store::store* store_ = nullptr;
    store::slots slots_;
    worker_context* worker_ = nullptr;
    /// The rule's in-flight gauge, counting `slots_` while they are held.
    metrics::gauge* in_flight_ = nullptr;
    /// The keys of the rule's CONCURRENCY limits in mode shape, by limit index: the lines a
    /// queued request waits in.
    boost::container::small_vector<std::pair<int, std::string>, 1> queue_keys_;
    /// The request was queued at least once: admitted after, it counts as delayed.
    bool waited_ = false;
    /// What the request reserves of each limit (1 without a `cost` block), by limit index.
    boost::container::small_vector<std::int64_t, 2> costs_;
    /// The reservations to settle from the response: limit index and key, aligned with
    /// `settle_sources_`.
    boost::container::small_vector<std::pair<int, std::string>, 1> reservations_;
    boost::container::small_vector<const config::cost_source*, 1> settle_sources_;
    std::uint64_t response_json_bytes_ = 0;
    bool costs_settled_ = false;
    /// The rule's counters, for the cost metrics of an admitted cost-weighted request.
    metrics::rule_counters* cost_counters_ = nullptr;
    std::optional<metrics::decision_kind> counted_as_;
    bool dry_run_rejected_ = false;
    std::optional<held_count> held_;
    /// The cap was reached: the store decided with waiting forbidden (`no_wait_limits_`).
    bool held_cap_reached_ = false;
    bool overloaded_ = false;
    /// The enforced shaping limits with `max-delay: 0`, which the checks point to when the cap
    /// was reached.
    std::vector<config::limit> no_wait_limits_;
};

} // namespace sluice::http::detail
