// SPDX-License-Identifier: Apache-2.0
// The request's limiter (request_limiter.hpp): from the request to its store checks (the rule,
// the keys, what a cost-weighted limit reserves), the decision (at once on the memory store, or
// awaited), the verdict and what the response and the counters say of it; a held request's
// decision kept and taken on; and, when the request is over, its slots given back and its costs
// settled. One object's methods over one request's limiter state, kept in one file so that
// each of its steps can be read beside the state it leaves for the next.
#include "http/request_limiter.hpp"

#include "sluice/core/json_fields.hpp"
#include "sluice/core/text.hpp"
#include "sluice/http/rate_limit_headers.hpp"
#include "sluice/key/client_address.hpp"
#include "sluice/key/rate_limit_key.hpp"
#include "sluice/limiter/algorithm.hpp"
#include "sluice/limiter/cost.hpp"

#include <algorithm>
#include <iterator>

namespace sluice::http::detail {
namespace {

metrics::decision_kind to_metric(verdict::kind what) noexcept {
    switch (what) {
    case verdict::kind::allowed:
        return metrics::decision_kind::allowed;
    case verdict::kind::delayed:
    case verdict::kind::queued:
        return metrics::decision_kind::delayed;
    case verdict::kind::rejected:
        return metrics::decision_kind::rejected;
    case verdict::kind::failed_open:
        return metrics::decision_kind::failed_open;
    case verdict::kind::failed_closed:
        return metrics::decision_kind::failed_closed;
    }
    return metrics::decision_kind::allowed;
}

bool any_dry_run_rejected(std::span<const config::limit> limits, const store::outcome& outcome) {
    if (outcome.ec || outcome.decisions.size() != limits.size()) {
        return false;
    }
    for (std::size_t i = 0; i < limits.size(); ++i) {
        if (limits[i].dry_run && !outcome.decisions[i].allowed) {
            return true;
        }
    }
    return false;
}

// An enforced limit that may hold a request: a leaky bucket in shape mode holds it for its
// slot, a concurrency limit in shape mode until a slot frees.
bool may_hold(const config::limit& limit) noexcept {
    return !limit.dry_run &&
           (limit.algo == config::algorithm::leaky_bucket ||
            limit.algo == config::algorithm::concurrency) &&
           limit.mode == config::shaping_mode::shape;
}

// X-Forwarded-For's lines joined as RFC 9110 says, in `joined` when there are several; read
// only from a trusted proxy. Each line is appended once: copying the list so far for every line
// made a header of many short lines quadratic (3.1 s of a worker for 512 KiB of them).
std::string_view
forwarded_for(const limited_request& req, const config::config& cfg, std::string& joined) {
    std::string_view xff;
    if (!key::is_trusted_proxy(req.peer, cfg.server.trusted_proxies)) {
        return xff;
    }
    for (const auto& f : req.message) {
        if (!iequals(f.name_string(), "x-forwarded-for")) {
            continue;
        }
        const std::string_view value = f.value();
        if (xff.empty()) {
            xff = value;
            continue;
        }
        if (joined.empty()) {
            joined.assign(xff); // the second line: the list goes on in `joined`
        }
        joined += ", ";
        joined += value;
        xff = joined;
    }
    return xff;
}

/// Calls `f(path)` for each path into the request's JSON body that `l` reads: its `json:` key
/// parts and its `cost.request` source.
template <typename F>
void for_each_request_json_path(const config::limit& l, F&& f) {
    for (const auto& part : l.key) {
        if (part.what == config::key_part::kind::json) {
            f(part.json);
        }
    }
    if (l.cost && l.cost->request.what == config::cost_source::kind::json) {
        f(l.cost->request.json);
    }
}

/// The fields of the request's JSON body that its limits read, found in one pass over the body.
class request_json {
public:
    request_json(std::span<const config::limit> limits, const limited_request& req) {
        for (const auto& l : limits) {
            for_each_request_json_path(l, [this](const json_path& p) { add(p); });
        }
        values_.resize(paths_.size());
        if (!paths_.empty() && req.body_complete) {
            find_json_fields(req.body, paths_, values_);
        }
    }

    /// The field at the path spelt `text`; nullptr when the body holds no scalar there.
    const json_scalar* find(std::string_view text) const noexcept {
        for (std::size_t i = 0; i < paths_.size(); ++i) {
            if (paths_[i]->text == text) {
                const auto& v = values_[i];
                const bool scalar =
                    v.what == json_scalar::kind::number || v.what == json_scalar::kind::string;
                return scalar ? &v : nullptr;
            }
        }
        return nullptr;
    }

private:
    void add(const json_path& path) {
        const auto same = [&path](const json_path* p) {
            return p->text == path.text;
        };
        if (std::none_of(paths_.begin(), paths_.end(), same)) {
            paths_.push_back(&path);
        }
    }

    boost::container::small_vector<const json_path*, 2> paths_;
    boost::container::small_vector<json_scalar, 2> values_;
};

// What a request reserves of a cost-weighted limit: the configured number, or the figure in the
// named request header or JSON field; `default` when that is absent or not a usable number (a
// JSON string "60" is no number).
template <typename Lookup>
std::int64_t
reservation_of(const config::cost_block& block, const Lookup& headers, const request_json& json) {
    using kind = config::cost_source::kind;
    std::optional<std::int64_t> figure;
    switch (block.request.what) {
    case kind::number:
        return block.request.number;
    case kind::header:
        if (const auto value = headers(block.request.header)) {
            figure = limiter::parse_cost_figure(*value);
        }
        break;
    case kind::json:
        if (const auto* value = json.find(block.request.json.text);
            value != nullptr && value->what == json_scalar::kind::number) {
            figure = limiter::parse_cost_figure(value->text);
        }
        break;
    case kind::none:
        break;
    }
    return figure.value_or(block.fallback);
}

/// What a limit reads of the request's JSON body, if anything: its `cost.max-body`, or the
/// default when only a key part does.
std::uint64_t json_body_bytes(const config::limit& l) noexcept {
    bool reads = false;
    for_each_request_json_path(l, [&reads](const json_path&) { reads = true; });
    if (!reads) {
        return 0;
    }
    return l.cost ? l.cost->max_body : config::default_json_body_bytes;
}

// The rule's cost metrics for one settled reservation: what it reserved, what it was finally
// charged, and, with a usable figure, the error `delta` (else on-missing applied).
void count_settlement(metrics::rule_counters* counters,
                      std::int64_t reserved,
                      std::int64_t delta,
                      bool had_figure) noexcept {
    if (counters == nullptr) {
        return;
    }
    metrics::add_amount(counters->cost_reserved, static_cast<std::uint64_t>(reserved));
    metrics::add_amount(counters->cost_settled,
                        static_cast<std::uint64_t>(std::max<std::int64_t>(reserved + delta, 0)));
    if (had_figure) {
        counters->cost_settle_error.observe(delta);
    } else {
        metrics::bump(counters->cost_missing);
    }
}

// `max-waiting`: a line of `waiting` requests is as long as `limit` lets it be.
bool line_full(const config::limit& limit, std::size_t waiting) noexcept {
    return limit.max_waiting && waiting >= static_cast<std::size_t>(*limit.max_waiting);
}

} // namespace

void request_limiter::select_rule(const config::config& cfg, const limited_request& req) {
    if (selected_) {
        return;
    }
    selected_ = true;
    rule_ = key::match_rule(cfg.rate_limit.rules, req.message.method_string(), req.path);
    rule_name_ = rule_ ? std::string_view(rule_->name) : "fallback";
    limits_ = rule_ ? std::span<const config::limit>(rule_->limits)
                    : std::span<const config::limit>(&cfg.rate_limit.fallback, 1);
}

std::uint64_t request_limiter::body_wanted(const config::config& cfg, const limited_request& req) {
    select_rule(cfg, req);
    std::uint64_t wanted = 0;
    for (const auto& l : limits_) {
        wanted = std::max(wanted, json_body_bytes(l));
    }
    return wanted;
}

bool request_limiter::repeats_a_header_it_reads(const config::config& cfg,
                                                const limited_request& req) {
    select_rule(cfg, req);
    const auto repeated = [&message = req.message](std::string_view name) {
        const auto [first, last] = message.equal_range(name);
        return first != last && std::next(first) != last;
    };
    for (const auto& l : limits_) {
        if (l.dry_run) {
            continue; // it decides nothing
        }
        for (const auto& part : l.key) {
            if (part.what == config::key_part::kind::header && repeated(part.header)) {
                return true;
            }
        }
        if (l.cost && l.cost->request.what == config::cost_source::kind::header &&
            repeated(l.cost->request.header)) {
            return true;
        }
    }
    return false;
}

void request_limiter::derive_checks(const config::config& cfg, const limited_request& req) {
    const auto& message = req.message;
    select_rule(cfg, req);
    if (limits_.empty()) {
        return;
    }
    std::string joined;
    const auto xff = forwarded_for(req, cfg, joined);
    const auto client = key::client_address(req.peer, xff, cfg.server.trusted_proxies);
    // The peer's text, made once for its connection: formatting the address again cost every
    // request 240 instructions.
    const std::string_view client_text = client == req.peer ? req.peer_text : std::string_view();
    if (cfg.logging.access_log) {
        client_ = client_text.empty() ? client.to_string() : std::string(client_text);
    }
    auto client_part = key::client_key_part(client, cfg.rate_limit.ipv6_prefix, client_text);
    if (const auto& redis = cfg.rate_limit.redis;
        cfg.rate_limit.store == config::store_kind::redis &&
        redis.topology == config::redis_topology::cluster &&
        redis.hash_tag == config::hash_tag_mode::ip) {
        // `hash-tag: ip`: the client part is the hash tag of every key holding it, so that all
        // of one client's limits share a Redis Cluster slot and are decided in one call.
        client_part.insert(client_part.begin(), '{');
        client_part.push_back('}');
    }
    auto lookup = [&message](std::string_view name) -> std::optional<std::string_view> {
        const auto it = message.find(name);
        return it == message.end() ? std::nullopt : std::optional<std::string_view>(it->value());
    };
    const request_json json(limits_, req);
    auto json_lookup = [&json](std::string_view text) -> std::optional<std::string_view> {
        const auto* value = json.find(text);
        return value != nullptr ? std::optional<std::string_view>(value->text) : std::nullopt;
    };
    auto keys = key::request_limit_keys(
        rule_, limits_, rule_name_, client_part, req.path, lookup, json_lookup);
    queue_keys_.clear();
    costs_.clear();
    reservations_.clear();
    settle_sources_.clear();
    response_json_bytes_ = 0;
    for (std::size_t i = 0; i < limits_.size(); ++i) {
        const auto& l = limits_[i];
        if (l.algo == config::algorithm::concurrency && may_hold(l)) {
            queue_keys_.emplace_back(static_cast<int>(i), keys[i]);
        }
        const auto cost = l.cost ? reservation_of(*l.cost, lookup, json) : 1;
        costs_.push_back(cost);
        if (l.cost && l.cost->response.what != config::cost_source::kind::none) {
            reservations_.emplace_back(static_cast<int>(i), keys[i]);
            settle_sources_.push_back(&l.cost->response);
            if (l.cost->response.what == config::cost_source::kind::json) {
                response_json_bytes_ = std::max(response_json_bytes_, l.cost->max_body);
            }
        }
        pending_.push_back({std::move(keys[i]), &l, cost});
    }
}

void request_limiter::settle_costs(std::span<const std::optional<std::string>> figures,
                                   bool usable) noexcept {
    if (costs_settled_ || reservations_.empty() || store_ == nullptr) {
        return;
    }
    costs_settled_ = true;
    // Only an admitted request was charged (a failed-open one was not decided at all).
    if (!v_.admitted() || outcome_.decisions.size() != limits_.size()) {
        return;
    }
    boost::container::small_vector<store::settlement, 1> adjustments;
    for (std::size_t k = 0; k < reservations_.size(); ++k) {
        const auto& [index, key] = reservations_[k];
        const auto i = static_cast<std::size_t>(index);
        if (!outcome_.decisions[i].allowed) {
            continue; // a dry-run limit that refused charged nothing
        }
        const auto& block = *limits_[i].cost;
        const auto reserved = limiter::clamp_cost(costs_[i]);
        std::optional<std::int64_t> actual;
        if (usable && k < figures.size() && figures[k]) {
            actual = limiter::parse_cost_figure(*figures[k]);
        }
        std::int64_t delta = 0;
        if (actual) {
            delta = *actual - reserved;
        } else if (block.refund_on_missing) {
            delta = -reserved;
        }
        if (delta < 0 && !limiter::takes_refunds(limits_[i])) {
            delta = 0; // a shaped queue's slots pass unused: counted as charged
        }
        count_settlement(cost_counters_, reserved, limiter::clamp_delta(delta), actual.has_value());
        if (delta != 0) {
            adjustments.push_back({key, &limits_[i], limiter::clamp_delta(delta), outcome_.local});
        }
    }
    if (!adjustments.empty()) {
        store_->settle(adjustments);
    }
}

bool request_limiter::join_line(worker_context& w) {
    if (w.waiters == nullptr) {
        return false;
    }
    // Where others wait for a slot of one of its keys, the next slot to free is theirs: the
    // request is not decided (a decision would take that slot out of turn, from a line that,
    // full, would then seldom get one), it joins the line, or is refused at once.
    int line = -1;
    int full = -1;
    for (const auto& [index, key] : queue_keys_) {
        const auto waiting = w.waiters->in_line(key);
        if (full < 0 && line_full(limits_[static_cast<std::size_t>(index)], waiting)) {
            full = index;
        }
        if (waiting > 0 && line < 0) {
            line = index;
        }
    }
    if (line < 0) {
        return false;
    }
    pending_.clear();
    v_ = {};
    if (held_cap_reached_ || full >= 0) {
        // At max-held it has no place to wait in (503, uncharged, as settle says); with
        // max-waiting, no place in its key's line (429, as in mode police). Not decided: no
        // RateLimit fields.
        held_.reset();
        v_.what = verdict::kind::rejected;
        v_.refused_by = held_cap_reached_ ? line : full;
        overloaded_ = held_cap_reached_;
        v_.retry_after = overloaded_ ? 1 : 0;
        word_ = overloaded_ ? "overloaded" : to_string(v_.what);
        counted_as_ =
            overloaded_ ? metrics::decision_kind::delayed : metrics::decision_kind::rejected;
        return true;
    }
    v_.what = verdict::kind::queued;
    v_.wait_for = line;
    waited_ = true;
    word_ = to_string(v_.what);
    counted_as_ = metrics::decision_kind::delayed;
    return true;
}

bool request_limiter::decide_now(worker_context& w) {
    auto now = w.store->try_acquire_now(pending_);
    if (!now) {
        return false;
    }
    pending_.clear();
    outcome_ = std::move(*now);
    settle();
    return true;
}

void request_limiter::settle_store_decision() {
    pending_.clear();
    settle();
}

// Takes the request's place among the held requests before the store decides it, when one of
// its limits may hold it. At the cap (rate-limit.max-held), the store decides with waiting
// forbidden instead: a request that would have to wait is then refused, uncharged, rather than
// admitted, charged and refused (503) after the fact. Reserving before deciding keeps the cap
// exact across workers and a store that decides asynchronously.
void request_limiter::reserve_hold(worker_context& w) {
    if (std::none_of(limits_.begin(), limits_.end(), may_hold)) {
        return;
    }
    held_.emplace(*w.held);
    if (held_->before() < cfg_->rate_limit.max_held) {
        return;
    }
    held_.reset();
    held_cap_reached_ = true;
    // The checks point into this vector: no reallocation after the first push.
    no_wait_limits_.reserve(pending_.size());
    for (auto& check : pending_) {
        if (may_hold(*check.limit)) {
            auto& copy = no_wait_limits_.emplace_back(*check.limit);
            copy.max_delay = milliseconds{0};
            check.limit = &copy;
        }
    }
}

bool request_limiter::try_now(worker_context& w,
                              const config::config& cfg,
                              const limited_request& req) {
    cfg_ = &cfg;
    derive_checks(cfg, req);
    if (pending_.empty()) {
        word_ = "unlimited";
        return true;
    }
    if (cfg.logging.access_log) {
        first_key_ = pending_.front().key;
    }
    reserve_hold(w);
    store_ = w.store;
    worker_ = &w;
    if (join_line(w)) {
        return true;
    }
    return decide_now(w);
}

bool request_limiter::try_again(worker_context& w, const limited_request& req) {
    pending_.clear();
    outcome_ = {};
    v_ = {};
    fields_ = {};
    dry_run_rejected_ = false;
    derive_checks(*cfg_, req);
    return decide_now(w);
}

void request_limiter::give_up() noexcept {
    const int index = v_.wait_for;
    v_ = {};
    v_.what = verdict::kind::rejected;
    v_.refused_by = index;
    held_.reset();
    word_ = to_string(v_.what);
    counted_as_ = metrics::decision_kind::rejected;
}

void request_limiter::drained() noexcept {
    held_.reset();
    word_ = "drained";
    dry_run_rejected_ = false; // that counts a request forwarded: this one never is
}

std::string_view request_limiter::wait_key() const noexcept {
    for (const auto& [index, key] : queue_keys_) {
        if (index == v_.wait_for) {
            return key;
        }
    }
    return {};
}

const config::limit* request_limiter::wait_limit() const noexcept {
    if (v_.wait_for < 0 || static_cast<std::size_t>(v_.wait_for) >= limits_.size()) {
        return nullptr;
    }
    return &limits_[static_cast<std::size_t>(v_.wait_for)];
}

void request_limiter::release_slots() noexcept {
    if (slots_.empty() || store_ == nullptr) {
        return;
    }
    store_->release(slots_);
    if (in_flight_ != nullptr) {
        in_flight_->fetch_sub(static_cast<std::int64_t>(slots_.size()), std::memory_order_relaxed);
    }
    slots_.clear();
}

void request_limiter::settle() {
    const auto& cfg = *cfg_;
    slots_ = std::move(outcome_.slots);
    if (!slots_.empty() && worker_ != nullptr) {
        in_flight_ = &worker_->rule_counters(rule_name_).in_flight;
        in_flight_->fetch_add(static_cast<std::int64_t>(slots_.size()), std::memory_order_relaxed);
    }
    v_ = decide(limits_, outcome_, cfg.rate_limit.redis.on_failure);
    if (held_cap_reached_ && v_.what == verdict::kind::queued) {
        // At the cap no request waits, for a slot no more than in a shaped bucket: it would wait
        // without a place among the held. Refused for the cap (503) below, uncharged (the store
        // charges nothing when a limit refuses); a slot frees with no estimate of when.
        v_.what = verdict::kind::rejected;
        v_.wait_for = -1;
        v_.retry_after = 1;
    } else if (v_.what == verdict::kind::queued && !waited_ && worker_ != nullptr &&
               worker_->waiters != nullptr &&
               line_full(*wait_limit(), worker_->waiters->in_line(wait_key()))) {
        // A newcomer to a full line: refused by its limit, as when every slot is taken in mode
        // police (429, no Retry-After), and charged nothing (the store charges no refusal).
        v_.what = verdict::kind::rejected;
        v_.wait_for = -1;
    }
    count_reservations();
    if (v_.what != verdict::kind::delayed && v_.what != verdict::kind::queued) {
        held_.reset();
    }
    waited_ = waited_ || v_.what == verdict::kind::queued;
    overloaded_ = held_cap_reached_ && v_.what == verdict::kind::rejected &&
                  refused_only_for_waiting(limits_, outcome_, costs_);
    // A request admitted after waiting for a slot was delayed, like a shaped one.
    const auto shown =
        waited_ && v_.what == verdict::kind::allowed ? verdict::kind::delayed : v_.what;
    word_ = overloaded_ ? "overloaded" : to_string(shown);
    // As before the cap was checked first: the limiter would have delayed it (then
    // sluice_held_overflow_total counts the refusal).
    counted_as_ = to_metric(overloaded_ ? verdict::kind::delayed : shown);
    dry_run_rejected_ = any_dry_run_rejected(limits_, outcome_);
    if (v_.headers_from >= 0) {
        fields_ = {rule_name_,
                   &outcome_.decisions[static_cast<std::size_t>(v_.headers_from)],
                   cfg.rate_limit.x_ratelimit_headers,
                   coarse_clock::now()};
    }
}

// An admitted request's cost metrics: the rule's counters for `settle_costs`, and the final
// charges of the limits whose reservation stands (no `cost.response`: nothing to settle).
void request_limiter::count_reservations() {
    if (worker_ == nullptr || !v_.admitted() || outcome_.decisions.size() != limits_.size()) {
        return;
    }
    for (std::size_t i = 0; i < limits_.size(); ++i) {
        if (!limits_[i].cost || !outcome_.decisions[i].allowed) {
            continue;
        }
        if (cost_counters_ == nullptr) {
            cost_counters_ = &worker_->rule_counters(rule_name_);
        }
        if (limits_[i].cost->response.what == config::cost_source::kind::none) {
            const auto reserved = static_cast<std::uint64_t>(limiter::clamp_cost(costs_[i]));
            metrics::add_amount(cost_counters_->cost_reserved, reserved);
            metrics::add_amount(cost_counters_->cost_settled, reserved);
        }
    }
}

held_decision request_limiter::suspend() {
    held_decision h;
    h.decisions.assign(outcome_.decisions.begin(), outcome_.decisions.end());
    h.slots.assign(std::make_move_iterator(slots_.begin()), std::make_move_iterator(slots_.end()));
    h.store = store_;
    slots_.clear();
    h.local = outcome_.local;
    h.v = v_;
    if (held_) {
        h.held.emplace(std::move(*held_));
        held_.reset();
    }
    h.in_flight = in_flight_;
    h.cost_counters = cost_counters_;
    h.counted_as = counted_as_;
    h.word = word_;
    h.waited = waited_;
    h.dry_run_rejected = dry_run_rejected_;
    h.decided_at = fields_.decided_at;
    // Its slots and reservations are the held record's now: nothing to give back or settle here.
    store_ = nullptr;
    return h;
}

void request_limiter::resume(worker_context& w,
                             const config::config& cfg,
                             const limited_request& req,
                             held_decision&& held) {
    cfg_ = &cfg;
    derive_checks(cfg, req);
    if (cfg.logging.access_log && !pending_.empty()) {
        first_key_ = pending_.front().key;
    }
    pending_.clear();
    store_ = w.store;
    worker_ = &w;
    outcome_ = {};
    outcome_.decisions.assign(held.decisions.begin(), held.decisions.end());
    outcome_.local = held.local;
    slots_.assign(std::make_move_iterator(held.slots.begin()),
                  std::make_move_iterator(held.slots.end()));
    held.slots.clear(); // this limiter gives them back now
    v_ = held.v;
    held_.reset();
    if (held.held) {
        held_.emplace(std::move(*held.held));
    }
    in_flight_ = held.in_flight;
    cost_counters_ = held.cost_counters;
    counted_as_ = held.counted_as;
    word_ = held.word;
    waited_ = held.waited;
    dry_run_rejected_ = held.dry_run_rejected;
    if (v_.headers_from >= 0 &&
        static_cast<std::size_t>(v_.headers_from) < outcome_.decisions.size()) {
        fields_ = {rule_name_,
                   &outcome_.decisions[static_cast<std::size_t>(v_.headers_from)],
                   cfg.rate_limit.x_ratelimit_headers,
                   held.decided_at};
    }
}

void request_limiter::begin_hold(worker_context& w) {
    if (!held_) {
        held_.emplace(*w.held);
    }
}

std::string_view request_limiter::first_key() const noexcept {
    return first_key_;
}

std::optional<metrics::decision_kind> request_limiter::counted_as() const noexcept {
    if (!counted_as_) {
        return std::nullopt;
    }
    // Each request counts once, so that the decisions add up to the requests. A request a
    // dry-run limit would have refused, but that went upstream anyway (at once or after a
    // hold), counts as dry_run_rejected; a refused or failed one counts as what it got.
    if (dry_run_rejected_ && (*counted_as_ == metrics::decision_kind::allowed ||
                              *counted_as_ == metrics::decision_kind::delayed)) {
        return metrics::decision_kind::dry_run_rejected;
    }
    return counted_as_;
}

local_reply request_limiter::refusal() const {
    if (overloaded_) {
        // Retry-After: the wait the request would have had.
        return {bhttp::status::service_unavailable, {}, v_.retry_after};
    }
    if (v_.what == verdict::kind::rejected && v_.never_fits && v_.refused_by >= 0 &&
        static_cast<std::size_t>(v_.refused_by) < limits_.size()) {
        const auto i = static_cast<std::size_t>(v_.refused_by);
        const auto& l = limits_[i];
        const bool windowed = l.algo == config::algorithm::fixed_window ||
                              l.algo == config::algorithm::sliding_window;
        const auto capacity = windowed ? l.limit_count : l.capacity;
        return {
            bhttp::status::too_many_requests,
            never_fits_body(rule_name_, v_.refused_by, limiter::clamp_cost(costs_[i]), capacity),
            0};
    }
    if (v_.what == verdict::kind::rejected) {
        const auto index = std::max(v_.refused_by, 0);
        const auto i = static_cast<std::size_t>(index);
        if (i < limits_.size() && limits_[i].cost && i < outcome_.decisions.size()) {
            return {bhttp::status::too_many_requests,
                    cost_rejection_body(rule_name_,
                                        index,
                                        v_.retry_after,
                                        limiter::clamp_cost(costs_[i]),
                                        outcome_.decisions[i].remaining),
                    v_.retry_after};
        }
        return {bhttp::status::too_many_requests,
                rejection_body(rule_name_, index, v_.retry_after),
                v_.retry_after};
    }
    return {bhttp::status::service_unavailable, {}, 1};
}

} // namespace sluice::http::detail
