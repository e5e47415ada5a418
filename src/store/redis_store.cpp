// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/redis_store.hpp"

#include "sluice/redis/scripts.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sluice::store {
namespace {

using std::chrono::milliseconds;

// The script's per-key argument group; see the header of src/redis/limits.lua.
constexpr std::size_t group_size = 6;

// The script's reply per key: allowed, remaining, reset_ms, retry_after_ms, delay_ms, level.
constexpr std::size_t reply_fields = 6;

int algorithm_code(config::algorithm a) noexcept {
    switch (a) {
    case config::algorithm::leaky_bucket:
        return 1;
    case config::algorithm::token_bucket:
        return 2;
    case config::algorithm::fixed_window:
        return 3;
    case config::algorithm::sliding_window:
        return 4;
    }
    return 0;
}

// %.17g round-trips a double exactly through Lua's tonumber (strtod), as the script needs.
std::string format_double(double x) {
    char buffer[32];
    const int n = std::snprintf(buffer, sizeof buffer, "%.17g", x);
    return std::string(buffer, static_cast<std::size_t>(std::max(n, 0)));
}

// The buckets' rounding in src/limiter/leaky_bucket.cpp, epsilon included: capacity x T is
// rarely exact in binary (21 x 1000 / 0.7 gives 30000.000000000004), and a plain ceil would
// report a window one ms longer than the memory store does.
milliseconds bucket_ceil_ms(double ms) noexcept {
    constexpr double ms_epsilon = 1e-6;
    return milliseconds{static_cast<std::int64_t>(std::ceil(std::max(0.0, ms - ms_epsilon)))};
}

// The policy's quota and window, as the C++ algorithms report them (no round trip needed).
void describe_policy(const config::limit& l, limiter::decision& d) noexcept {
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
        d.limit = l.capacity;
        d.window = bucket_ceil_ms(static_cast<double>(l.capacity) * (1000.0 / l.flow_rate));
        break;
    case config::algorithm::token_bucket:
        d.limit = l.capacity;
        d.window = bucket_ceil_ms(static_cast<double>(l.capacity) * (1000.0 / l.refill_rate));
        break;
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        d.limit = l.limit_count;
        d.window = l.window;
        break;
    }
}

// The two numeric parameters of a limit's argument group: {capacity, rate per s} for the
// buckets, {limit, window in ms} for the windows (see the header of src/redis/limits.lua).
std::pair<std::string, std::string> parameters(const config::limit& l) {
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
        return {std::to_string(l.capacity), format_double(l.flow_rate)};
    case config::algorithm::token_bucket:
        return {std::to_string(l.capacity), format_double(l.refill_rate)};
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        break;
    }
    return {std::to_string(l.limit_count), std::to_string(l.window.count())};
}

bool is_noscript(error_code ec, const redis::reply& r) {
    return ec == errc::bad_reply && r.str.starts_with("NOSCRIPT");
}

// The script's reply as decisions, or false when it has another shape.
bool parse_reply(const redis::reply& r, const checks& request_checks, outcome& out) {
    if (r.type != redis::reply::kind::array || r.elements.size() != request_checks.size()) {
        return false;
    }
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        const auto& fields = r.elements[i].elements;
        if (fields.size() < reply_fields ||
            !std::all_of(fields.begin(), fields.end(), [](const redis::reply& f) {
                return f.type == redis::reply::kind::integer;
            })) {
            return false;
        }
        limiter::decision d;
        describe_policy(*request_checks[i].limit, d);
        d.allowed = fields[0].integer == 1;
        d.remaining = fields[1].integer;
        d.reset_after = milliseconds{fields[2].integer};
        d.retry_after = milliseconds{fields[3].integer};
        d.delay = milliseconds{fields[4].integer};
        out.decisions.push_back(d);
    }
    return true;
}

} // namespace

redis_store::redis_store(redis::client& client,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : client_(client)
    , ttl_(settings.ttl)
    , on_failure_(settings.on_failure)
    , local_fallback_(local_fallback) {
    client_.add_connect_command({"SCRIPT", "LOAD", std::string(redis::limits_script.text)});
}

redis_store::redis_store(executor ex,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : owned_client_(std::make_unique<redis::client>(std::move(ex),
                                                    redis::client_options::from_settings(settings)))
    , client_(*owned_client_)
    , ttl_(settings.ttl)
    , on_failure_(settings.on_failure)
    , local_fallback_(local_fallback) {
    client_.add_connect_command({"SCRIPT", "LOAD", std::string(redis::limits_script.text)});
    client_.start();
}

redis_store::~redis_store() = default;

std::vector<std::string> redis_store::script_command(const checks& request_checks,
                                                     bool with_text) const {
    std::vector<std::string> args;
    args.reserve(5 + request_checks.size() * (1 + group_size));
    args.emplace_back(with_text ? "EVAL" : "EVALSHA");
    args.emplace_back(with_text ? redis::limits_script.text : redis::limits_script.sha1);
    args.push_back(std::to_string(request_checks.size()));
    for (const auto& c : request_checks) {
        args.push_back(c.key);
    }
    args.push_back(now_override_ ? format_double(*now_override_) : std::string());
    args.push_back(std::to_string(ttl_.count()));
    for (const auto& c : request_checks) {
        const config::limit& l = *c.limit;
        auto [p1, p2] = parameters(l);
        args.push_back(std::to_string(algorithm_code(l.algo)));
        args.push_back(std::move(p1));
        args.push_back(std::move(p2));
        args.emplace_back(l.mode == config::shaping_mode::shape ? "0" : "1");
        args.push_back(l.max_delay ? std::to_string(l.max_delay->count()) : "-1");
        args.emplace_back(l.dry_run ? "1" : "0");
    }
    return args;
}

awaitable<outcome> redis_store::acquire(checks request_checks) {
    if (request_checks.empty()) {
        co_return outcome{};
    }
    const auto started = std::chrono::steady_clock::now();
    auto result = co_await client_.async_command(script_command(request_checks, false));
    if (metrics_ != nullptr) {
        metrics_->redis_latency.observe(std::chrono::steady_clock::now() - started);
    }
    if (is_noscript(std::get<0>(result), std::get<1>(result))) {
        // The script cache was emptied since this connection loaded it: EVAL loads it again.
        auto retried = co_await client_.async_command(script_command(request_checks, true));
        result = std::move(retried);
    }
    const auto& [ec, r] = result;
    if (ec) {
        co_return fail(request_checks, ec, r);
    }
    outcome out;
    if (!parse_reply(r, request_checks, out)) {
        co_return fail(request_checks, errc::bad_reply, r);
    }
    co_return out;
}

outcome redis_store::fail(const checks& request_checks, error_code ec, const redis::reply& r) {
    if (metrics_ != nullptr) {
        metrics::bump(ec == errc::redis_timeout ? metrics_->redis_timeouts_total
                                                : metrics_->redis_errors_total);
        metrics::bump(metrics_->store_errors_total);
    }
    // Unavailability is the client's to report (once per outage); a bad reply is a bug or a
    // misconfiguration an operator must see, but not once per request.
    if (ec == errc::bad_reply) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_warning_ >= std::chrono::seconds(10)) {
            last_warning_ = now;
            spdlog::warn("redis store: unexpected reply to the limits script: {}", r.describe());
        }
    }
    if (on_failure_ == config::failure_mode::local && local_fallback_ != nullptr) {
        return local_fallback_->acquire_now(request_checks);
    }
    outcome out;
    out.ec = ec;
    return out;
}

std::unique_ptr<store> make_redis_store(executor ex,
                                        const config::redis_settings& settings,
                                        memory_store* local_fallback) {
    return std::make_unique<redis_store>(std::move(ex), settings, local_fallback);
}

} // namespace sluice::store
