// SPDX-License-Identifier: Apache-2.0
// The limiter's side of a request: its rule and keys, the store's decision, the verdict.
#include "http/session_state_detail.hpp"
#include "sluice/http/rate_limit_headers.hpp"
#include "sluice/key/client_address.hpp"
#include "sluice/key/rate_limit_key.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>
#include <optional>
#include <span>

namespace sluice::http::detail {
namespace {

// Fills `r.limits` and the store checks for this request; returns the rule's name.
std::string_view
derive_checks(connection_state& c, request_state& r, std::string_view path, store::checks& checks) {
    const auto& cfg = *r.cfg;
    const auto& req = r.parser.get();
    const auto* rule = key::match_rule(cfg.rate_limit.rules, req.method_string(), path);
    r.limits = rule ? std::span<const config::limit>(rule->limits)
                    : std::span<const config::limit>(&cfg.rate_limit.fallback, 1);
    if (r.limits.empty()) {
        return rule->name;
    }

    // X-Forwarded-For matters only behind a trusted proxy; join its lines as RFC 9110 says.
    std::string joined;
    std::string_view xff;
    if (!cfg.server.trusted_proxies.empty()) {
        for (const auto& f : req) {
            if (!beast::iequals(f.name_string(), "x-forwarded-for")) {
                continue;
            }
            if (!xff.empty()) {
                joined = std::string(xff) + ", " + std::string(f.value());
                xff = joined;
            } else {
                xff = f.value();
            }
        }
    }
    const auto client = key::client_address(c.peer, xff, cfg.server.trusted_proxies);
    if (cfg.logging.access_log) {
        r.record.client = client.to_string();
    }
    const auto client_part = key::client_key_part(client, cfg.rate_limit.ipv6_prefix);
    auto lookup = [&req](std::string_view name) -> std::optional<std::string_view> {
        const auto it = req.find(name);
        return it == req.end() ? std::nullopt : std::optional<std::string_view>(it->value());
    };
    const std::string_view rule_name = rule ? std::string_view(rule->name) : "fallback";
    auto keys = key::request_limit_keys(rule, r.limits, rule_name, client_part, path, lookup);
    for (std::size_t i = 0; i < r.limits.size(); ++i) {
        checks.push_back({std::move(keys[i]), &r.limits[i]});
    }
    return rule_name;
}

metrics::decision_kind to_metric(verdict::kind what) noexcept {
    switch (what) {
    case verdict::kind::allowed:
        return metrics::decision_kind::allowed;
    case verdict::kind::delayed:
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

// An enforced limit that may hold a request: a leaky bucket in shape mode.
bool may_hold(const config::limit& limit) noexcept {
    return !limit.dry_run && limit.algo == config::algorithm::leaky_bucket &&
           limit.mode == config::shaping_mode::shape;
}

// Takes the request's place among the held requests before the store decides it, when one of
// its limits may hold it. At the cap (rate-limit.max-held), the store decides with waiting
// forbidden instead: a request that would have to wait is then refused, uncharged, rather than
// admitted, charged and refused (503) after the fact. Reserving before deciding keeps the cap
// exact across workers and a store that decides asynchronously.
void reserve_hold(connection_state& c, request_state& r, store::checks& checks) {
    if (std::none_of(r.limits.begin(), r.limits.end(), may_hold)) {
        return;
    }
    r.held.emplace(*c.w.held);
    if (r.held->before() < r.cfg->rate_limit.max_held) {
        return;
    }
    r.held.reset();
    r.held_cap_reached = true;
    // The checks point into this vector: no reallocation after the first push.
    r.no_wait_limits.reserve(checks.size());
    for (auto& check : checks) {
        if (may_hold(*check.limit)) {
            auto& copy = r.no_wait_limits.emplace_back(*check.limit);
            copy.max_delay = milliseconds{0};
            check.limit = &copy;
        }
    }
}

} // namespace

void apply_outcome(request_state& r) {
    const auto& cfg = *r.cfg;
    r.v = decide(r.limits, r.outcome, cfg.rate_limit.redis.on_failure);
    if (r.v.what != verdict::kind::delayed) {
        r.held.reset();
    }
    r.overloaded = r.held_cap_reached && r.v.what == verdict::kind::rejected &&
                   refused_only_for_waiting(r.limits, r.outcome);
    r.record.decision = r.overloaded ? "overloaded" : to_string(r.v.what);
    // As before the cap was checked first: the limiter would have delayed it (then
    // sluice_held_overflow_total counts the refusal).
    r.counted_as = to_metric(r.overloaded ? verdict::kind::delayed : r.v.what);
    r.dry_run_rejected = any_dry_run_rejected(r.limits, r.outcome);
    if (r.v.headers_from >= 0) {
        r.reply.limits = {r.rule_name,
                          &r.outcome.decisions[static_cast<std::size_t>(r.v.headers_from)],
                          cfg.rate_limit.x_ratelimit_headers};
    }
}

store::checks decide_now(connection_state& c, request_state& r) {
    store::checks checks;
    r.rule_name = derive_checks(c, r, r.record.path, checks);
    if (checks.empty()) {
        r.record.decision = "unlimited";
        return checks;
    }
    if (r.cfg->logging.access_log) {
        r.record.key = checks.front().key;
    }
    reserve_hold(c, r, checks);
    auto now = c.w.store->try_acquire_now(checks);
    if (!now) {
        return checks;
    }
    r.outcome = std::move(*now);
    apply_outcome(r);
    return {};
}

local_reply refusal(const request_state& r) {
    if (r.overloaded) {
        // Retry-After: the wait the request would have had.
        return {bhttp::status::service_unavailable, {}, r.v.retry_after};
    }
    if (r.v.what == verdict::kind::rejected) {
        return {bhttp::status::too_many_requests,
                rejection_body(r.rule_name, std::max(r.v.refused_by, 0), r.v.retry_after),
                r.v.retry_after};
    }
    return {bhttp::status::service_unavailable, {}, 1};
}

} // namespace sluice::http::detail
