// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/session.hpp"

#include "http/session_detail.hpp"
#include "sluice/http/access_log.hpp"
#include "sluice/http/rate_limit_headers.hpp"
#include "sluice/http/verdict.hpp"
#include "sluice/key/client_address.hpp"
#include "sluice/key/path.hpp"
#include "sluice/key/rate_limit_key.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <span>

namespace sluice::http {
namespace {

using namespace detail;

/// What the connection does after a request.
enum class ending {
    keep,   // read the next request
    close,  // the client is gone or broke the protocol mid-body: close now
    linger, // a final response went out with Connection: close: close gracefully
};

/// A held request reads ahead at most this much (body or pipelined requests) while it waits.
constexpr std::size_t hold_read_ahead = 64 * 1024;

/// State of one connection.
struct connection_state {
    worker_context& w;
    timed_stream& stream;
    beast::flat_buffer& buffer;
    session_entry& entry;
    key::ip_address peer;
    std::string peer_text;
    /// Reused by every message header written on this connection.
    header_scratch scratch;
};

/// State of one request.
struct request_state {
    explicit request_state(std::shared_ptr<const config::config> snapshot) noexcept
        : cfg(std::move(snapshot)) {}

    std::shared_ptr<const config::config> cfg;
    request_parser parser;
    access_record record;
    reply_context reply;
    /// The rule's name ("fallback" when none matched), for the per-rule counters.
    std::string_view rule_name;
    /// Set once the request went to the limiter; what it decided, for the counters.
    std::optional<metrics::decision_kind> counted_as;
    bool dry_run_rejected = false;
    std::span<const config::limit> limits;
    store::outcome outcome;
    verdict v;
    bool keep_alive = false;
    bool expect_continue = false;
};

key::ip_address to_ip(const net::ip::address& address) {
    key::ip_address ip;
    if (address.is_v6() && address.to_v6().is_v4_mapped()) {
        return to_ip(net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6()));
    }
    if (address.is_v4()) {
        const auto bytes = address.to_v4().to_bytes();
        std::copy(bytes.begin(), bytes.end(), ip.bytes.begin());
        ip.v4 = true;
    } else {
        const auto bytes = address.to_v6().to_bytes();
        std::copy(bytes.begin(), bytes.end(), ip.bytes.begin());
        ip.v4 = false;
    }
    return ip;
}

// Writes a local answer and settles the request body: read and drop a small one, otherwise
// close (never read a large body only to throw it away).
awaitable<ending>
answer(connection_state& c, request_state& r, const local_reply& reply, bool must_close) {
    bool keep_alive = r.keep_alive && !must_close && !c.w.draining;
    if (keep_alive && !r.parser.is_done()) {
        // After Expect: 100-continue without a 100, the client may or may not send the body.
        keep_alive = !r.expect_continue && r.parser.content_length() &&
                     *r.parser.content_length() <= max_discard_bytes;
        if (keep_alive) {
            keep_alive =
                co_await discard_body(c.stream, c.buffer, r.parser, r.cfg->server.idle_timeout);
        }
    }
    r.record.status = static_cast<unsigned>(reply.status);
    auto ec = co_await write_local_reply(c.stream, reply, r.reply, keep_alive);
    if (ec) {
        co_return ending::close;
    }
    co_return keep_alive ? ending::keep : ending::linger;
}

awaitable<void> wait_timer(steady_timer& timer) {
    auto [ec] = co_await timer.async_wait();
    (void)ec;
}

// Reads ahead from a held client to notice it leaving. True: it closed (or failed); false: it
// is still there but sent `hold_read_ahead` bytes, so watching would mean buffering a body.
awaitable<bool> watch_client(connection_state& c) {
    for (;;) {
        if (c.buffer.size() >= hold_read_ahead) {
            co_return false;
        }
        const auto room = std::min<std::size_t>(hold_read_ahead - c.buffer.size(), 16 * 1024);
        auto [ec, n] = co_await c.stream.socket().async_read_some(c.buffer.prepare(room));
        c.buffer.commit(n);
        if (ec == net::error::operation_aborted) {
            co_return false;
        }
        if (ec) {
            co_return true;
        }
    }
}

// Holds a request for its shaping delay. Returns false if the client left meanwhile.
awaitable<bool> hold(connection_state& c, milliseconds delay) {
    using namespace net::experimental::awaitable_operators;
    steady_timer timer(c.stream.get_executor(), delay);
    auto first = co_await (wait_timer(timer) || watch_client(c));
    if (first.index() == 0) {
        co_return true;
    }
    if (std::get<1>(first)) {
        co_return false;
    }
    co_await wait_timer(timer);
    co_return true;
}

constexpr std::string_view key_prefix = "rate-limit:";

// The page's own key, rate-limit:<ip>:<endpoint>, unique per rule by its endpoint part.
bool is_page_key(const config::limit& limit) noexcept {
    using kind = config::key_part::kind;
    return limit.key.size() == 2 && limit.key[0].what == kind::ip &&
           limit.key[1].what == kind::endpoint;
}

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
    const bool pattern_key = rule && rule->kind != config::rule::match_kind::exact;
    const std::string_view endpoint = pattern_key ? std::string_view(rule->path) : path;
    auto lookup = [&req](std::string_view name) -> std::optional<std::string_view> {
        const auto it = req.find(name);
        return it == req.end() ? std::nullopt : std::optional<std::string_view>(it->value());
    };
    const std::string_view rule_name = rule ? std::string_view(rule->name) : "fallback";
    bool page_key_taken = false;
    // A method-filtered rule shares its path with the fallback (or another rule) serving the
    // other methods: only the fallback and rules for every method may own the page's key.
    const bool page_key_allowed = rule == nullptr || rule->methods.empty();
    for (std::size_t i = 0; i < r.limits.size(); ++i) {
        const auto& limit = r.limits[i];
        auto k = key::limit_key(limit, client_part, endpoint, lookup);
        // The first [ip, endpoint] limit of a rule owns the page's key. Any other key would
        // collide across rules or with a sibling limit (e.g. [ip], [global], or a second
        // [ip, endpoint] limit): scope it by rule and limit index, "rate-limit:api#1:...".
        if (!page_key_taken && page_key_allowed && is_page_key(limit)) {
            page_key_taken = true;
        } else {
            k.insert(key_prefix.size(), fmt::format("{}#{}:", rule_name, i));
        }
        checks.push_back({std::move(k), &limit});
    }
    return rule_name;
}

// Forwards the request now; the verdict allowed it.
awaitable<ending> forward_now(connection_state& c, request_state& r) {
    forward_args args{c.stream,
                      c.buffer,
                      r.parser,
                      *c.w.pool,
                      *r.cfg,
                      c.peer_text,
                      r.reply,
                      r.keep_alive,
                      r.expect_continue,
                      &c.w.draining,
                      c.scratch,
                      c.w.relay_buffers};
    const auto result = co_await forward(args);
    r.record.status = result.status;
    r.record.upstream_time = result.upstream_time;
    if (result.status == 0) {
        co_return ending::close;
    }
    co_return result.keep_alive ? ending::keep : ending::linger;
}

/// Counts a request in the global number of held requests for as long as it lives.
class held_count {
public:
    explicit held_count(std::atomic<std::int64_t>& counter) noexcept
        : counter_(&counter)
        , before_(counter.fetch_add(1, std::memory_order_relaxed)) {}

    held_count(const held_count&) = delete;
    held_count& operator=(const held_count&) = delete;

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

// Shaping: holds the request until its slot, then forwards it, unless too many are held
// already (503) or the client leaves meanwhile (never forwarded).
awaitable<ending> hold_then_forward(connection_state& c, request_state& r) {
    held_count held(*c.w.held);
    if (held.before() >= r.cfg->rate_limit.max_held) {
        held.release();
        r.record.decision = "overloaded";
        metrics::bump(c.w.metrics->held_overflow_total);
        spdlog::warn("rate-limit.max-held ({}) reached: answering 503", r.cfg->rate_limit.max_held);
        local_reply reply{bhttp::status::service_unavailable, {}, retry_after_seconds(r.v.delay)};
        auto e = co_await answer(c, r, reply, false);
        co_return e;
    }
    r.record.delay = r.v.delay;
    metrics::bump(c.w.metrics->held_total);
    const bool present = co_await hold(c, r.v.delay);
    held.release();
    if (!present) {
        metrics::bump(c.w.metrics->held_abandoned_total);
        r.record.status = 499; // nginx's "client closed request"
        co_return ending::close;
    }
    auto e = co_await forward_now(c, r);
    co_return e;
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

// Everything after a valid header: limits, verdict, then the answer or the forward.
awaitable<ending> decide_and_serve(connection_state& c, request_state& r, std::string_view path) {
    const auto& cfg = *r.cfg;
    store::checks checks;
    const auto name = derive_checks(c, r, path, checks);
    r.rule_name = name;
    if (!checks.empty()) {
        if (r.cfg->logging.access_log) {
            r.record.key = checks.front().key;
        }
        if (auto now = c.w.store->try_acquire_now(checks)) {
            r.outcome = std::move(*now);
        } else {
            r.outcome = co_await c.w.store->acquire(std::move(checks));
        }
        r.v = decide(r.limits, r.outcome, cfg.rate_limit.redis.on_failure);
        r.record.decision = to_string(r.v.what);
        r.counted_as = to_metric(r.v.what);
        r.dry_run_rejected = any_dry_run_rejected(r.limits, r.outcome);
    } else {
        r.record.decision = "unlimited";
    }
    if (r.v.headers_from >= 0) {
        r.reply.limits = {name,
                          &r.outcome.decisions[static_cast<std::size_t>(r.v.headers_from)],
                          cfg.rate_limit.x_ratelimit_headers};
    }
    switch (r.v.what) {
    case verdict::kind::rejected: {
        local_reply reply{bhttp::status::too_many_requests,
                          rejection_body(name, std::max(r.v.refused_by, 0), r.v.retry_after),
                          r.v.retry_after};
        auto e = co_await answer(c, r, reply, false);
        co_return e;
    }
    case verdict::kind::failed_closed: {
        const local_reply reply{bhttp::status::service_unavailable, {}, 1};
        auto e = co_await answer(c, r, reply, false);
        co_return e;
    }
    default:
        break;
    }
    if (r.v.what == verdict::kind::delayed) {
        auto e = co_await hold_then_forward(c, r);
        co_return e;
    }
    auto e = co_await forward_now(c, r);
    co_return e;
}

// Reads the request header and checks it; then decides and serves the request.
awaitable<ending> handle_request(connection_state& c, request_state& r) {
    const auto& cfg = *r.cfg;
    r.parser.header_limit(static_cast<std::uint32_t>(
        std::min<std::uint64_t>(cfg.server.max_header_bytes, UINT32_MAX)));
    if (cfg.server.max_body_bytes > 0) {
        r.parser.body_limit(cfg.server.max_body_bytes);
    } else {
        r.parser.body_limit(boost::none);
    }
    r.reply.write_timeout = cfg.server.idle_timeout;
    c.stream.expires_after(cfg.server.header_timeout);
    const auto ec = co_await read_header(c.stream, c.buffer, r.parser, cfg.server.max_header_bytes);
    c.entry.idle = false;
    if (ec) {
        const auto status = header_error_status(ec, c.buffer.size() != 0);
        if (!status) {
            co_return ending::close;
        }
        const local_reply reply{*status, {}, 0};
        auto e = co_await answer(c, r, reply, true);
        co_return e;
    }

    const auto& req = r.parser.get();
    r.record.method = req.method_string();
    r.reply.version = req.version();
    r.reply.head = req.method() == bhttp::verb::head;
    r.keep_alive = r.parser.keep_alive();
    r.expect_continue = req.version() >= 11 && req.find(bhttp::field::expect) != req.end();
    if (const auto status = check_request(r.parser, cfg)) {
        const local_reply reply{*status, {}, 0};
        auto e = co_await answer(c, r, reply, true);
        co_return e;
    }
    auto path = key::normalize_path(req.target());
    if (!path) {
        r.record.path = req.target();
        const local_reply reply{bhttp::status::bad_request, {}, 0};
        auto e = co_await answer(c, r, reply, false);
        co_return e;
    }
    r.record.path = std::move(*path);
    auto e = co_await decide_and_serve(c, r, r.record.path);
    co_return e;
}

// Waits for the first byte of the next request, for at most server.idle_timeout.
awaitable<bool> wait_for_request(connection_state& c) {
    if (c.buffer.size() != 0) {
        co_return true;
    }
    c.stream.expires_after(c.w.config->server.idle_timeout);
    auto [ec, n] = co_await c.stream.async_read_some(c.buffer.prepare(1024));
    c.buffer.commit(n);
    co_return !ec;
}

// Counts the request in the metrics: the limiter's decision per rule, the upstream's answer.
void count_request(connection_state& c, const request_state& r) {
    auto& m = *c.w.metrics;
    if (r.counted_as) {
        auto& rule = c.w.rule_counters(r.rule_name);
        rule.count(*r.counted_as);
        if (r.dry_run_rejected) {
            rule.count(metrics::decision_kind::dry_run_rejected);
        }
    }
    if (r.record.upstream_time.count() < 0) {
        if (r.record.status == 400 || r.record.status == 413 || r.record.status == 414 ||
            r.record.status == 431) {
            metrics::bump(m.bad_requests_total);
        }
        return;
    }
    m.upstream_latency.observe(r.record.upstream_time);
    const auto status_class = r.record.status / 100;
    metrics::bump(m.upstream_status[status_class >= 1 && status_class <= 5 ? status_class : 0]);
    if (r.record.status == 502) {
        metrics::bump(m.upstream_connect_errors_total);
    } else if (r.record.status == 504) {
        metrics::bump(m.upstream_timeouts_total);
    }
}

void log_access(const connection_state& c, request_state& r) {
    if (!c.w.access_log || !r.cfg->logging.access_log || r.record.method.empty()) {
        return;
    }
    if (r.record.client.empty()) {
        r.record.client = c.peer_text;
    }
    c.w.access_log->info(format_access(r.record, r.cfg->logging.format));
}

} // namespace

metrics::rule_counters& worker_context::rule_counters(std::string_view rule_name) {
    auto found = rule_counters_.find(rule_name);
    if (found == rule_counters_.end()) {
        auto& counters = metrics->rule(std::string(rule_name));
        found = rule_counters_.emplace(std::string(rule_name), &counters).first;
    }
    return *found->second;
}

void worker_context::begin_drain() noexcept {
    draining = true;
    for (auto& s : sessions) {
        if (s.idle) {
            error_code ignored;
            s.stream->socket().cancel(ignored);
        }
    }
    session_ended();
}

void worker_context::session_ended() noexcept {
    if (draining && sessions.empty() && !drained_) {
        drained_ = true;
        if (on_drained) {
            on_drained();
        }
    }
}

awaitable<void> run_session(tcp_socket socket, worker_context& worker) {
    error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    const auto remote = socket.remote_endpoint(ec);
    if (ec) {
        co_return;
    }
    timed_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    session_entry entry(stream);
    worker.sessions.push_back(entry);
    metrics::bump(worker.metrics->connections_total);
    worker.metrics->connections_open.fetch_add(1, std::memory_order_relaxed);
    connection_state c{worker, stream, buffer, entry, to_ip(remote.address()), {}, {}};
    c.peer_text = c.peer.to_string();

    auto e = ending::keep;
    while (e == ending::keep && !worker.draining) {
        entry.idle = true;
        const bool ready = co_await wait_for_request(c);
        if (!ready) {
            e = ending::close;
            break;
        }
        request_state r{worker.config};
        e = co_await handle_request(c, r);
        count_request(c, r);
        log_access(c, r);
    }
    if (e == ending::linger) {
        co_await lingering_close(stream);
    }
    stream.socket().close(ec);
    entry.unlink();
    worker.metrics->connections_open.fetch_sub(1, std::memory_order_relaxed);
    worker.session_ended();
}

} // namespace sluice::http
