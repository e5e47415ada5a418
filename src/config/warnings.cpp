// SPDX-License-Identifier: Apache-2.0
#include "loader_detail.hpp"
#include "sluice/core/saturate.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::config::detail {
namespace {

/// How long a limit's state must outlive a quiet client, and what it means when it does not.
struct retention {
    std::chrono::milliseconds needed{0};
    std::string needs;  // "needs to drain a full bucket (capacity 50 / flowRate 2 = 25s)"
    std::string effect; // "a quiet client's queue state would be forgotten"
};

std::chrono::milliseconds ceil_ms(double ms) {
    return saturating_ms(std::ceil(ms));
}

retention retention_of(const limit& l) {
    switch (l.algo) {
    case algorithm::leaky_bucket: {
        const auto needed = ceil_ms(static_cast<double>(l.capacity) * 1000 / l.flow_rate);
        return {needed,
                "needs to drain a full bucket (capacity " + std::to_string(l.capacity) +
                    " / flowRate " + format_number(l.flow_rate) + " = " + format_duration(needed) +
                    ")",
                "a quiet client's queue state would be forgotten"};
    }
    case algorithm::token_bucket: {
        const auto needed = ceil_ms(static_cast<double>(l.capacity) * 1000 / l.refill_rate);
        return {needed,
                "needs to refill an empty bucket (capacity " + std::to_string(l.capacity) +
                    " / refillRate " + format_number(l.refill_rate) + " = " +
                    format_duration(needed) + ")",
                "a quiet client's bucket state would be forgotten and refilled early"};
    }
    case algorithm::concurrency:
        // Slot sets expire with their leases in Redis, not after `ttl`.
    case algorithm::fixed_window:
    case algorithm::sliding_window:
        // Window keys expire with their own window in Redis, not after `ttl`: nothing to warn.
        return {};
    }
    return {};
}

std::string where(const config& cfg, int line) {
    return line > 0 ? cfg.source + ":" + std::to_string(line) : cfg.source;
}

void check_ttl(config& cfg, const limit& l, const std::string& owner) {
    const auto ttl = cfg.rate_limit.redis.ttl;
    const auto r = retention_of(l);
    if (r.needs.empty() || r.needed <= ttl) {
        return;
    }
    cfg.warnings.push_back(where(cfg, l.line) + ": rate-limit.redis.ttl " + format_duration(ttl) +
                           " is shorter than " + owner + " " + r.needs + ": " + r.effect);
}

/// Redis forgets a key after `ttl`; a limit whose state matters for longer is weakened.
void ttl_warnings(config& cfg) {
    check_ttl(cfg, cfg.rate_limit.fallback, "the fallback limit");
    for (const auto& r : cfg.rate_limit.rules) {
        for (std::size_t i = 0; i < r.limits.size(); ++i) {
            check_ttl(cfg, r.limits[i], "rule '" + r.name + "' limit " + std::to_string(i + 1));
        }
    }
}

/// The part of a pattern before its first '*': every path it matches starts with this.
std::string_view literal_prefix(const rule& r) {
    const std::string_view path = r.path;
    return path.substr(0, path.find('*'));
}

/// Whether every request that `later` matches is matched by `earlier` (first match wins).
bool covers(const rule& earlier, const rule& later) {
    const auto in_earlier = [&](const std::string& m) {
        return std::find(earlier.methods.begin(), earlier.methods.end(), m) !=
               earlier.methods.end();
    };
    const bool methods = earlier.methods.empty() ||
                         (!later.methods.empty() &&
                          std::all_of(later.methods.begin(), later.methods.end(), in_earlier));
    if (!methods) {
        return false;
    }
    if (earlier.path == later.path) {
        return true;
    }
    return earlier.kind == rule::match_kind::prefix &&
           literal_prefix(later).starts_with(literal_prefix(earlier));
}

void shadow_warnings(config& cfg) {
    const auto& rules = cfg.rate_limit.rules;
    for (std::size_t j = 0; j < rules.size(); ++j) {
        for (std::size_t i = 0; i < j; ++i) {
            if (rules[i].path.empty() || rules[j].path.empty() || !covers(rules[i], rules[j])) {
                continue;
            }
            cfg.warnings.push_back(where(cfg, rules[j].line) + ": rule '" + rules[j].name +
                                   "' (line " + std::to_string(rules[j].line) +
                                   ") is shadowed by rule '" + rules[i].name + "' (line " +
                                   std::to_string(rules[i].line) +
                                   "): every request it matches is matched by '" + rules[i].name +
                                   "' first, so its limits never apply");
            break;
        }
    }
}

/// What a limit holds at most (a bucket's capacity, a window's limit); 0 for CONCURRENCY, which
/// takes no cost.
std::int64_t most_held(const limit& l) {
    switch (l.algo) {
    case algorithm::leaky_bucket:
    case algorithm::token_bucket:
        return l.capacity;
    case algorithm::fixed_window:
    case algorithm::sliding_window:
        return l.limit_count;
    case algorithm::concurrency:
        break;
    }
    return 0;
}

void check_cost(config& cfg, const limit& l, const std::string& owner) {
    const auto most = most_held(l);
    if (!l.cost || most <= 0) {
        return;
    }
    const auto& c = *l.cost;
    // A fixed reservation, or the default one a request without its figure reserves.
    const bool fixed = c.request.what == cost_source::kind::number;
    const auto reserved = fixed ? c.request.number : c.fallback;
    if (reserved <= most) {
        return;
    }
    cfg.warnings.push_back(where(cfg, l.line) + ": " + owner + " reserves " +
                           std::to_string(reserved) +
                           (fixed ? " (cost.request)"
                                  : " (cost.default) for a request without its "
                                    "figure") +
                           ", more than the " + std::to_string(most) +
                           " it holds: every such request is refused (429), whatever the traffic");
}

/// A cost that never fits: knowable from the file alone, and a limit that refuses everything.
void cost_warnings(config& cfg) {
    check_cost(cfg, cfg.rate_limit.fallback, "the fallback limit");
    for (const auto& r : cfg.rate_limit.rules) {
        for (std::size_t i = 0; i < r.limits.size(); ++i) {
            check_cost(cfg, r.limits[i], "rule '" + r.name + "' limit " + std::to_string(i + 1));
        }
    }
}

// A tunnel cap at or above the upstream connections keeps nothing for other requests.
void tunnel_warning(config& cfg) {
    const auto& up = cfg.upstream;
    if (up.max_tunnels == 0 || up.max_tunnels < up.max_connections) {
        return;
    }
    const auto at = cfg.key_lines.find("upstream.max-tunnels");
    cfg.warnings.push_back(where(cfg, at == cfg.key_lines.end() ? 0 : at->second) +
                           ": upstream.max-tunnels " + std::to_string(up.max_tunnels) +
                           " is not below upstream.max-connections (" +
                           std::to_string(up.max_connections) +
                           "): WebSocket tunnels can still take every upstream connection");
}

} // namespace

void add_warnings(config& cfg) {
    if (cfg.rate_limit.store == store_kind::redis) {
        ttl_warnings(cfg);
    }
    tunnel_warning(cfg);
    shadow_warnings(cfg);
    cost_warnings(cfg);
}

} // namespace sluice::config::detail
