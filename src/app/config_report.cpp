// SPDX-License-Identifier: Apache-2.0
#include "app/config_report.hpp"

#include "sluice/config/loader.hpp"

#include <fmt/format.h>

namespace sluice::app {

std::string describe_limit(const config::limit& l) {
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
        return fmt::format("LEAKY_BUCKET capacity={} flowRate={}/s {}{}",
                           l.capacity,
                           l.flow_rate,
                           l.mode == config::shaping_mode::shape ? "shape" : "police",
                           l.dry_run ? " dry-run" : "");
    case config::algorithm::token_bucket:
        return fmt::format("TOKEN_BUCKET capacity={} refill={}/s{}",
                           l.capacity,
                           l.refill_rate,
                           l.dry_run ? " dry-run" : "");
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        return fmt::format("{} limit={} window={}ms{}",
                           l.algo == config::algorithm::fixed_window ? "FIXED_WINDOW"
                                                                     : "SLIDING_WINDOW",
                           l.limit_count,
                           l.window.count(),
                           l.dry_run ? " dry-run" : "");
    case config::algorithm::concurrency:
        return fmt::format("CONCURRENCY limit={} {}{} lease={}ms{}",
                           l.limit_count,
                           l.mode == config::shaping_mode::shape ? "shape" : "police",
                           l.max_waiting ? fmt::format(" max-waiting={}", *l.max_waiting) : "",
                           l.lease.count(),
                           l.dry_run ? " dry-run" : "");
    }
    return "?";
}

std::string describe_redis(const config::redis_settings& redis) {
    switch (redis.topology) {
    case config::redis_topology::single:
        break;
    case config::redis_topology::cluster: {
        auto text = fmt::format("redis cluster {}", config::format_address(redis.cluster.front()));
        if (const auto more = redis.cluster.size() - 1; more > 0) {
            text += fmt::format(" (+{} seed{})", more, more == 1 ? "" : "s");
        }
        return text;
    }
    case config::redis_topology::sentinel: {
        auto text = fmt::format("redis sentinel '{}' via {}",
                                redis.sentinel.master,
                                config::format_address(redis.sentinel.nodes.front()));
        if (const auto more = redis.sentinel.nodes.size() - 1; more > 0) {
            text += fmt::format(" (+{})", more);
        }
        return text;
    }
    }
    return redis.host.starts_with('/')
               ? fmt::format("redis {}", redis.host)
               : "redis " + config::format_address({redis.host, redis.port});
}

std::vector<std::string>
summary_lines(const config::config& cfg, std::string_view bound, std::size_t workers) {
    // The Redis address, never its credentials: the summary goes wherever the logs go.
    std::string store = "memory";
    if (cfg.rate_limit.store == config::store_kind::redis) {
        store = describe_redis(cfg.rate_limit.redis);
    }
    std::string proxies;
    for (const auto& block : cfg.server.trusted_proxies) {
        proxies += proxies.empty() ? "" : " ";
        proxies += block.to_string();
    }
    const auto& fallback = cfg.rate_limit.fallback;
    const auto max_delay =
        fallback.max_delay ? fmt::format("{}ms", fallback.max_delay->count()) : std::string("none");
    std::vector<std::string> lines{
        fmt::format("sluice starting: listen {}, upstream {}:{}, store {}, {} workers, fallback {} "
                    "max-delay={}, {} rules, max_held {}, trusted proxies [{}]",
                    bound,
                    cfg.upstream.host,
                    cfg.upstream.port,
                    store,
                    workers,
                    describe_limit(fallback),
                    max_delay,
                    cfg.rate_limit.rules.size(),
                    cfg.rate_limit.max_held,
                    proxies)};
    for (const auto& rule : cfg.rate_limit.rules) {
        for (const auto& limit : rule.limits) {
            lines.push_back(
                fmt::format("rule '{}' {}: {}", rule.name, rule.path, describe_limit(limit)));
        }
    }
    return lines;
}

std::string redis_restart_keys(const config::config& running, const config::config& next) {
    if (running.rate_limit.store != config::store_kind::redis) {
        return {};
    }
    const auto& a = running.rate_limit.redis;
    const auto& b = next.rate_limit.redis;
    std::string keys;
    const auto check = [&keys, &next](bool differs, const char* key) {
        if (differs) {
            keys += keys.empty() ? "" : ", ";
            keys += config::located_key(next, std::string("rate-limit.redis.") + key);
        }
    };
    check(a.host != b.host, "host");
    check(a.port != b.port, "port");
    check(a.cluster != b.cluster, "cluster");
    check(a.hash_tag != b.hash_tag, "hash-tag");
    check(a.sentinel != b.sentinel, "sentinel");
    check(a.username != b.username, "username");
    // A secret rotated in its file names the file's key: that is what the operator changed.
    check(a.password != b.password, b.password_file.empty() ? "password" : "password-file");
    check(a.db != b.db, "db");
    check(a.timeout != b.timeout, "timeout");
    check(a.connect_timeout != b.connect_timeout, "connect-timeout");
    // A file that leaves Redis (store: memory, its redis section gone or edited) changed the
    // store, not these: name what the operator changed.
    if (!keys.empty() && next.rate_limit.store != config::store_kind::redis) {
        return config::located_key(next, "rate-limit.store");
    }
    return keys;
}

std::string keep_restart_only_keys(const config::config& running, config::config& next) {
    std::string keys;
    // Puts the running value back in `next` and names the key when the file changed it.
    const auto keep = [&keys, &next](auto& value, const auto& running_value, const char* key) {
        if (!(value == running_value)) {
            value = running_value;
            keys += keys.empty() ? "" : ", ";
            keys += config::located_key(next, key);
        }
    };
    keep(next.server.listen, running.server.listen, "server.listen");
    keep(next.server.workers, running.server.workers, "server.workers");
    keep(next.server.max_connections, running.server.max_connections, "server.max-connections");
    keep(next.rate_limit.store, running.rate_limit.store, "rate-limit.store");
    keep(next.rate_limit.memory.max_keys,
         running.rate_limit.memory.max_keys,
         "rate-limit.memory.max-keys");
    keep(next.admin.enabled, running.admin.enabled, "admin.enabled");
    keep(next.admin.listen, running.admin.listen, "admin.listen");
    return keys;
}

} // namespace sluice::app
