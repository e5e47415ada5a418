// SPDX-License-Identifier: Apache-2.0
#include "http/request_handler.hpp"

#include "http/forwarder.hpp"
#include "http/local_reply.hpp"
#include "http/message_reader.hpp"
#include "http/request_checks.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/http/rate_limit_headers.hpp"
#include "sluice/key/path.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/http/error.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <optional>

namespace sluice::http::detail {
namespace {

using std::chrono::steady_clock;

/// A held request reads ahead at most this much (body or pipelined requests) while it waits.
constexpr std::size_t hold_read_ahead = 64 * 1024;

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

// Reads ahead from a held client to notice it leaving. Waits for bytes without a buffer, so
// that a client that sends nothing (a GET waiting for its slot) makes sluice keep none: the
// buffer grows only when bytes come (a body, or pipelined requests). Returns what ended the
// watch: the client closed or failed, the stream's deadline passed (beast::error::timeout), or
// the watch was cancelled (which `wait_for_slot` does only once the wait is over, and then
// ignores the answer: any other cancellation must not pass for "still there"); no error: it is
// still there but sent `hold_read_ahead` bytes, so watching would mean buffering a body.
awaitable<error_code> watch_client(connection_state& c) {
    for (;;) {
        if (c.buffer.size() >= hold_read_ahead) {
            co_return error_code{};
        }
        if (!c.stream.readable_now()) {
            auto [ec] = co_await c.stream.async_wait_readable();
            if (ec) {
                co_return ec;
            }
        }
        const auto room = std::min<std::size_t>(hold_read_ahead - c.buffer.size(), 16 * 1024);
        auto [ec, n] = co_await c.stream.async_read_some(c.buffer.prepare(room));
        c.buffer.commit(n);
        if (ec) {
            co_return ec;
        }
    }
}

awaitable<void> sleep_until(executor ex, steady_clock::time_point until) {
    steady_timer timer(ex, until);
    co_await wait_timer(timer);
}

// What a request waiting in sluice need not keep: an empty read buffer's storage and the header
// scratch, both allocated again when next needed.
void release_buffers(connection_state& c, header_scratch& scratch) {
    if (c.buffer.size() == 0) {
        c.buffer.shrink_to_fit();
    }
    // Not `= {}`: a string's move from an empty one keeps its own storage.
    std::string().swap(scratch.header);
    std::string().swap(scratch.lines);
}

// Holds a request for its shaping delay. Returns false if the client left meanwhile.
awaitable<bool> hold(connection_state& c, header_scratch& scratch, milliseconds delay) {
    // The stream's deadline ends the hold: when it passes, the stream's watchdog cancels the
    // watch, which then ends with beast::error::timeout. A held request thus has no timer of
    // its own, nor a parallel wait of two coroutines (bench/memory: without them, their read
    // buffer and one more frame, a held request went from 14.1 to 7.6 KiB, its connection
    // included).
    const auto until = steady_clock::now() + delay;
    c.stream.expires_after(delay);
    release_buffers(c, scratch);
    const auto ec = co_await watch_client(c);
    // Every later read and write sets its own deadline.
    c.stream.expires_never();
    if (ec == beast::error::timeout) {
        co_return true;
    }
    if (ec) {
        co_return false;
    }
    co_await sleep_until(c.stream.get_executor(), until); // it sent a body's worth
    co_return true;
}

/// How often a request waiting for a slot asks the store again without being woken: the slot
/// of an instance that died frees only when its lease lapses, and nothing announces that. A
/// third of the lease, as the renewals, within [100 ms, 1 s].
milliseconds recheck_interval(const config::limit& limit) {
    return std::clamp(limit.lease / 3, milliseconds{100}, milliseconds{1'000});
}

/// What a wait for a slot came to.
enum class slot_wait {
    decided,   // decided again: admitted, refused by another limit, or the store failed
    timed_out, // max-delay passed without a free slot
    left,      // the client left
};

// Waits in the line of the slot's key (CONCURRENCY, mode shape) until woken by a freed slot or
// the recheck interval, then decides the request again, until it is no longer queued. Every
// limit of the request is decided again each time: nothing was charged while it was queued.
awaitable<slot_wait> wait_for_slot(connection_state& c, request_state& r) {
    using namespace net::experimental::awaitable_operators;
    const auto* limit = r.limiter.wait_limit();
    const auto started = steady_clock::now();
    const auto deadline = limit != nullptr && limit->max_delay
                              ? std::optional(started + *limit->max_delay)
                              : std::nullopt;
    const auto recheck = recheck_interval(limit != nullptr ? *limit : config::limit{});
    c.stream.expires_never(); // as in `hold`: the header's deadline must not cut the wait
    steady_timer timer(c.stream.get_executor());
    bool woken = false; // a wake-up may come while the store decides: it must not be lost
    auto wake = [&woken, &timer] {
        woken = true;
        timer.cancel();
    };
    std::string ticket_key(r.limiter.wait_key());
    auto ticket = c.w.waiters->join(ticket_key, c.stream.get_executor(), wake);
    bool watching = true;
    while (r.limiter.result().what == verdict::kind::queued) {
        if (!woken) {
            auto wake_at = steady_clock::now() + recheck;
            if (deadline && *deadline < wake_at) {
                wake_at = *deadline;
            }
            timer.expires_at(wake_at);
            if (watching) {
                auto first = co_await (wait_timer(timer) || watch_client(c));
                if (first.index() == 1) {
                    if (std::get<1>(first)) { // it left
                        ticket.give_up();
                        co_return slot_wait::left;
                    }
                    watching = false; // it sent a body's worth: wait without watching
                    co_await wait_timer(timer);
                }
            } else {
                co_await wait_timer(timer);
            }
        }
        woken = false;
        if (deadline && steady_clock::now() >= *deadline) {
            ticket.give_up();
            co_return slot_wait::timed_out;
        }
        // Woken or not (the recheck), no wake-up may go to it while it decides: this decision
        // may admit it, and the slot freed meanwhile would then be lost to the line.
        ticket.begin_decision();
        if (!r.limiter.try_again(c.w, r.limited(c.peer))) {
            r.limiter.settle(co_await c.w.store->acquire(r.limiter.take_pending()));
        }
        if (r.limiter.result().what != verdict::kind::queued) {
            break;
        }
        if (r.limiter.wait_key() != ticket_key) {
            ticket_key = r.limiter.wait_key();
            ticket = c.w.waiters->join(ticket_key, c.stream.get_executor(), wake);
        } else if (ticket.rearm()) { // keeps its place in the line
            woken = true;            // a slot freed while every waiter decided: try again
        }
    }
    c.w.metrics->slot_wait.observe(steady_clock::now() - started);
    co_return slot_wait::decided;
}

// What `forward` needs for this request. The caller keeps it until forward completes.
// (Not a coroutine `forward_now` around forward: that would be one more frame per request.)
forward_args forward_args_for(connection_state& c, request_state& r, header_scratch& scratch) {
    return {c.stream,
            c.buffer,
            r.parser,
            r.arena,
            *c.w.pool,
            *r.cfg,
            c.peer_text,
            r.reply,
            r.keep_alive,
            r.expect_continue,
            &c.w.draining,
            scratch,
            c.w.relay_buffers,
            r.body_started,
            r.limiter.settle_sources(),
            r.limiter.response_json_bytes(),
            r.body_read_ahead,
            r.body_ahead};
}

// Records what forwarding came to; returns what the connection does next.
ending forwarded(request_state& r, const forward_result& result) {
    // A response cut short, or a 5xx, says nothing honest about what the request cost.
    const bool usable = result.upstream == upstream_outcome::response && result.cut_short.empty() &&
                        result.status < 500;
    r.limiter.settle_costs(result.figures, usable);
    r.record.status = result.status;
    r.record.upstream_time = result.upstream_time;
    if (!result.cut_short.empty()) {
        r.record.end = result.cut_short;
    }
    r.upstream = result.upstream;
    if (result.status == 0 || result.status == 101) {
        // No response, or a tunnel that is over: the connection has nothing more to carry, and
        // a lingering close would only wait for a client that has closed or gone quiet.
        return ending::close;
    }
    return result.keep_alive ? ending::keep : ending::linger;
}

// Shaping: the request starts its hold (its place among the held was taken before the store
// decided it: see request_limiter::try_now).
void begin_hold(connection_state& c, request_state& r) {
    r.limiter.begin_hold(c.w);
    r.record.delay = r.limiter.result().delay;
    metrics::bump(c.w.metrics->held_total);
}

// Sets up the parser for this request's header and body.
void prepare_parser(request_state& r) {
    const auto& cfg = *r.cfg;
    r.parser.header_limit(static_cast<std::uint32_t>(
        std::min<std::uint64_t>(cfg.server.max_header_bytes, UINT32_MAX)));
    if (cfg.server.max_body_bytes > 0) {
        r.parser.body_limit(cfg.server.max_body_bytes);
    } else {
        r.parser.body_limit(boost::none);
    }
    r.reply.write_timeout = cfg.server.idle_timeout;
}

/// A request that ends before the limiter: the answer (none: close at once), and whether the
/// connection closes after it.
struct early_end {
    std::optional<local_reply> reply;
    bool must_close = true;
};

// Everything between reading the header (`ec`: how that went) and the limiter: the request's
// facts, the checks Beast leaves to us, the path. nullopt: on to the limiter.
std::optional<early_end> check_header(connection_state& c, request_state& r, const error_code& ec) {
    if (ec) {
        const auto status = header_error_status(ec, c.buffer.size() != 0);
        if (!status) {
            return early_end{};
        }
        // A header refused after its request line was parsed (a field too large, say) is
        // answered, so it gets its access-log line; before that there is no method to log.
        r.record.method = r.parser.get().method_string();
        r.record.path = r.parser.get().target();
        return early_end{local_reply{*status, {}, 0}, true};
    }
    const auto& req = r.parser.get();
    r.record.method = req.method_string();
    r.reply.version = req.version();
    r.reply.head = req.method() == bhttp::verb::head;
    r.keep_alive = r.parser.keep_alive();
    r.expect_continue = req.version() >= 11 && req.find(bhttp::field::expect) != req.end();
    if (const auto status = check_request(r.parser, *r.cfg)) {
        return early_end{local_reply{*status, {}, 0}, true};
    }
    if (!rewrite_absolute_form(r.parser.get())) {
        r.record.path = req.target();
        return early_end{local_reply{bhttp::status::bad_request, {}, 0}, false};
    }
    auto path = key::normalize_path(req.target());
    if (!path) {
        r.record.path = req.target();
        return early_end{local_reply{bhttp::status::bad_request, {}, 0}, false};
    }
    r.record.path = std::move(*path);
    return std::nullopt;
}

// How reading the body ahead ended, for the limiter's `json:` fields: nullopt when it was read
// (all, or `cost.max-body` of a longer body); otherwise how the request ends (the connection
// closes).
std::optional<early_end> ending_of(body_read read) {
    switch (read) {
    case body_read::done:
        return std::nullopt;
    case body_read::broken:
        return early_end{local_reply{bhttp::status::bad_request, {}, 0}, true};
    case body_read::too_large:
        return early_end{local_reply{bhttp::status::payload_too_large, {}, 0}, true};
    case body_read::too_slow:
        return early_end{local_reply{bhttp::status::request_timeout, {}, 0}, true};
    case body_read::client_gone:
        break;
    }
    return early_end{};
}

// What the response and the access log take from the limiter's decision.
void note_decision(request_state& r) {
    r.reply.limits = r.limiter.response_fields();
    r.record.decision = r.limiter.decision_word();
    if (r.cfg->logging.access_log) {
        r.record.key = r.limiter.first_key();
        r.record.client = r.limiter.client();
    }
}

// Counts the request in the metrics: the limiter's decision per rule, and what the forwarder
// saw of the upstream (a 502 or 504 sluice wrote is no upstream response; a client's broken
// body or departure says nothing about the upstream).
void count_request(connection_state& c, const request_state& r) {
    auto& m = *c.w.metrics;
    if (const auto kind = r.limiter.counted_as()) {
        c.w.rule_counters(r.limiter.rule_name()).count(*kind);
    }
    const auto upstream = r.upstream.value_or(upstream_outcome::client_failed);
    switch (upstream) {
    case upstream_outcome::response: {
        m.upstream_latency.observe(r.record.upstream_time);
        const auto status_class = r.record.status / 100;
        metrics::bump(m.upstream_status[status_class >= 1 && status_class <= 5 ? status_class : 0]);
        return;
    }
    case upstream_outcome::connect_failed:
        metrics::bump(m.upstream_status[0]);
        metrics::bump(m.upstream_connect_errors_total);
        return;
    case upstream_outcome::failed:
        metrics::bump(m.upstream_status[0]);
        return;
    case upstream_outcome::timed_out:
        metrics::bump(m.upstream_status[0]);
        metrics::bump(m.upstream_timeouts_total);
        return;
    case upstream_outcome::busy:
        metrics::bump(m.upstream_busy_total);
        return;
    case upstream_outcome::client_failed:
        break;
    }
    if (r.record.status == 408) {
        metrics::bump(m.client_timeouts_total);
    }
    if (r.record.status == 400 || r.record.status == 413 || r.record.status == 414 ||
        r.record.status == 431) {
        metrics::bump(m.bad_requests_total);
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

awaitable<ending> handle_request(connection_state& c, request_memory& m) {
    auto& r = *m.state;
    const auto limit = r.cfg->server.max_header_bytes;
    prepare_parser(r);
    c.stream.expires_after(r.cfg->server.header_timeout);
    auto ec = error_code{};
    if (auto taken = take_header(c.buffer, r.parser, limit)) {
        ec = *taken;
    } else {
        ec = co_await read_header(c.stream, c.buffer, r.parser, limit);
    }
    c.entry.idle = false;
    if (auto early = check_header(c, r, ec)) {
        if (!early->reply) {
            co_return ending::close;
        }
        auto e = co_await answer(c, r, *early->reply, early->must_close);
        co_return e;
    }
    if (const auto wanted = r.limiter.body_wanted(*r.cfg, r.limited(c.peer));
        wanted > 0 && !r.parser.is_done()) {
        r.body_read_ahead = true;
        const body_source src{
            c.stream, c.buffer, r.parser, *r.cfg, r.expect_continue, r.body_started};
        auto read = take_body_ahead(src, r.body_ahead, wanted);
        if (!read) {
            read = co_await read_body_ahead(src, r.body_ahead, wanted);
        }
        if (auto early = ending_of(*read)) {
            if (!early->reply) {
                co_return ending::close;
            }
            auto e = co_await answer(c, r, *early->reply, early->must_close);
            co_return e;
        }
    }
    if (!r.limiter.try_now(c.w, *r.cfg, r.limited(c.peer))) {
        r.limiter.settle(co_await c.w.store->acquire(r.limiter.take_pending()));
    }
    note_decision(r);
    const auto& verdict = r.limiter.result();
    if (r.limiter.overloaded()) {
        // A peer can trigger this at will: one line per second at most.
        static log_throttle throttle;
        metrics::bump(c.w.metrics->held_overflow_total);
        log_throttled(throttle,
                      spdlog::level::warn,
                      "rate-limit.max-held ({}) reached: answering 503",
                      r.cfg->rate_limit.max_held);
    }
    if (verdict.what == verdict::kind::queued) {
        const auto waited = co_await wait_for_slot(c, r);
        if (waited == slot_wait::left) {
            r.limiter.end_hold();
            metrics::bump(c.w.metrics->held_abandoned_total);
            r.record.status = 499; // nginx's "client closed request"
            co_return ending::close;
        }
        if (waited == slot_wait::timed_out) {
            r.limiter.give_up();
        }
        note_decision(r);
    }
    if (verdict.what == verdict::kind::rejected || verdict.what == verdict::kind::failed_closed) {
        const auto reply = r.limiter.refusal();
        auto e = co_await answer(c, r, reply, false);
        co_return e;
    }
    if (verdict.what == verdict::kind::delayed) {
        // Held until its slot, then forwarded, unless the client leaves meanwhile (never
        // forwarded). Here rather than in a coroutine of its own: a held request would keep
        // that frame too (456 bytes, with its own forward_args and forward_result).
        begin_hold(c, r);
        const bool present = co_await hold(c, m.scratch, r.record.delay);
        r.limiter.end_hold();
        if (!present) {
            metrics::bump(c.w.metrics->held_abandoned_total);
            r.record.status = 499; // nginx's "client closed request"
            co_return ending::close;
        }
    }
    auto args = forward_args_for(c, r, m.scratch);
    const auto result = co_await forward(args);
    co_return forwarded(r, result);
}

void finish_request(connection_state& c, request_state& r) {
    count_request(c, r);
    log_access(c, r);
}

} // namespace sluice::http::detail
