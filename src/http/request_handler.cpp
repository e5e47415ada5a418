// SPDX-License-Identifier: Apache-2.0
#include "http/request_handler.hpp"

#include "http/client_body.hpp"
#include "http/forwarder.hpp"
#include "http/local_reply.hpp"
#include "http/message_reader.hpp"
#include "http/request_checks.hpp"
#include "http/request_wait.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/http/rate_limit_headers.hpp"
#include "sluice/key/path.hpp"

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <optional>

namespace sluice::http::detail {
namespace {

using std::chrono::steady_clock;

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
            // Within body-timeout, counted from the body's first read if one was made, and
            // idle-timeout: the whole body, not each read.
            const auto& server = r.cfg->server;
            const auto now = steady_clock::now();
            const auto spent =
                std::chrono::duration_cast<milliseconds>(now - r.body_started.value_or(now));
            const auto budget =
                std::clamp(server.body_timeout - spent, milliseconds{0}, server.idle_timeout);
            keep_alive = co_await discard_body(c.stream, c.buffer, r.parser, now + budget);
        }
    }
    r.record.status = static_cast<unsigned>(reply.status);
    auto ec = co_await write_local_reply(c.stream, reply, r.reply, keep_alive);
    if (ec) {
        co_return ending::close;
    }
    co_return keep_alive ? ending::keep : ending::linger;
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
            r.body_ahead,
            r.body_started,
            r.limiter.settle_sources(),
            r.limiter.response_json_bytes(),
            r.body_read_ahead,
            false,
            &c.entry,
            &c.w.drain_deadline,
            &c.w.tunnels};
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
    if (result.reset) {
        return ending::reset;
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
    r.parser.header_limit(header_limit_of(cfg.server.max_header_bytes));
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
// facts, the checks Beast leaves to us, the path, the fields `server.headers-with-underscores`
// takes out. nullopt: on to the limiter. `counted`: false for a held request's header parsed
// again, whose fields were counted the first time.
std::optional<early_end>
check_header(connection_state& c, request_state& r, const error_code& ec, bool counted = true) {
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
    const auto taken =
        take_underscored_fields(r.parser.get(), r.cfg->server.headers_with_underscores);
    if (!taken) {
        return early_end{local_reply{bhttp::status::bad_request, {}, 0}, false};
    }
    if (*taken > 0 && counted) {
        metrics::bump(c.w.metrics->dropped_header_fields_total, *taken);
    }
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
    case upstream_outcome::tunnels_full:
        metrics::bump(m.tunnels_refused_total);
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
    if (c.w.access_log == nullptr || !r.cfg->logging.access_log || r.record.method.empty()) {
        return;
    }
    if (r.record.client.empty()) {
        r.record.client = c.peer_text;
    }
    // In the format in force now, not the request's snapshot's: a reload may have changed it
    // since the request began, and the logger's frame follows the one in force.
    c.w.access_log->write(r.record);
}

/// How a request held without its coroutine goes on (`resume_hold`).
struct resumed_hold {
    steady_clock::time_point until;
    /// Its wait ended before `until`: the client sent something or left, and the hold goes on in
    /// the coroutine, which reads to tell (`hold`).
    bool goes_on = false;
};

// Makes a request `suspend_hold` held without its memory again, in `m` (its state made), once its
// wait is over: its snapshot, its header parsed again from the bytes kept at the front of the
// connection's buffer, the same checks (the same facts for the response and the log), the
// limiter's decision. nullopt if the kept header no longer parses as it did (it cannot: the
// same bytes, parser and checks).
std::optional<resumed_hold> resume_hold(connection_state& c, request_memory& m) {
    const auto held = std::move(c.held);
    c.entry.waits_until = {}; // a hold that goes on marks it again (`hold`)
    auto& r = *m.state;
    r.cfg = held->cfg;
    prepare_parser(r);
    const auto ec = take_header(c.buffer, r.parser, r.cfg->server.max_header_bytes, &m.header);
    worker_context::mark_busy(c.entry);
    if (!ec || *ec || check_header(c, r, *ec, false)) {
        return std::nullopt;
    }
    r.limiter.resume(c.w, *r.cfg, r.limited(c.peer, c.peer_text), std::move(held->decision));
    note_decision(r);
    r.record.delay = r.limiter.result().delay;
    const bool goes_on = held->woken_by != beast::error::timeout;
    if (!goes_on) {
        c.stream.expires_never(); // as `hold` ends: every later read and write sets its own
    }
    return resumed_hold{held->until, goes_on};
}

// The end of a request's hold: its place among the held given back; an abandoned one counted.
void hold_ended(connection_state& c, request_state& r, hold_end end) {
    r.limiter.end_hold();
    if (end == hold_end::left) {
        metrics::bump(c.w.metrics->held_abandoned_total);
        r.record.status = 499; // nginx's "client closed request"
    }
}

// A request waiting in sluice when a drain would stop its worker before the wait ends: answered
// 503 with Connection: close, so that its client can retry on an instance that stays, where it
// would otherwise have been cut off at the drain's deadline without an answer. Retry-After: the
// hold it had left (its slot passes unused: a shaped bucket takes no refunds), or 1 s for a
// wait for a slot, whose end is unknown. Never forwarded.
awaitable<ending> answer_drained(connection_state& c,
                                 request_state& r,
                                 std::optional<steady_clock::time_point> until) {
    metrics::bump(c.w.metrics->held_drained_total);
    r.limiter.drained();
    note_decision(r);
    const auto left = until ? std::chrono::duration_cast<milliseconds>(*until - steady_clock::now())
                            : milliseconds{0};
    const local_reply reply{bhttp::status::service_unavailable, {}, retry_after_seconds(left)};
    co_return co_await answer(c, r, reply, true);
}

} // namespace

// One coroutine, in the order a request goes (header, checks, body ahead, limiter, hold,
// forward): a step split out into a coroutine of its own would be one more frame that every
// request in flight holds, and its steps are named by the helpers each calls.
awaitable<ending> handle_request(connection_state& c, request_memory& m) {
    auto& r = *m.state;
    const auto limit = r.cfg->server.max_header_bytes;
    prepare_parser(r);
    c.stream.expires_after(r.cfg->server.header_timeout);
    auto ec = error_code{};
    if (auto taken = take_header(c.buffer, r.parser, limit, &m.header)) {
        ec = *taken;
    } else {
        ec = co_await read_header(c.stream, c.buffer, r.parser, limit, &m.header);
    }
    worker_context::mark_busy(c.entry);
    // One `early` and one answer for every end before the limiter, the refusal's included: each
    // would be a slot of its own in this frame, which every request in flight holds.
    auto early = check_header(c, r, ec);
    if (!early && r.limiter.repeats_a_header_it_reads(*r.cfg, r.limited(c.peer, c.peer_text))) {
        early = early_end{local_reply{bhttp::status::bad_request, {}, 0}, false};
    }
    if (!early) {
        if (const auto wanted = r.limiter.body_wanted(*r.cfg, r.limited(c.peer, c.peer_text));
            wanted > 0 && !r.parser.is_done()) {
            r.body_read_ahead = true;
            const body_source src{
                c.stream, c.buffer, r.parser, *r.cfg, r.expect_continue, r.body_started};
            auto read = take_body_ahead(src, r.body_ahead, wanted);
            if (!read) {
                read = co_await read_body_ahead(src, r.body_ahead, wanted);
            }
            early = ending_of(*read);
        }
    }
    if (early) {
        if (!early->reply) {
            co_return ending::close;
        }
        auto e = co_await answer(c, r, *early->reply, early->must_close);
        co_return e;
    }
    if (!r.limiter.try_now(c.w, *r.cfg, r.limited(c.peer, c.peer_text))) {
        co_await r.limiter.store_decision();
        r.limiter.settle_store_decision();
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
        const auto wait_began = steady_clock::now();
        const auto waited = co_await wait_for_slot(c, r);
        r.record.slot_wait =
            std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - wait_began);
        if (waited == slot_wait::left) {
            hold_ended(c, r, hold_end::left);
            co_return ending::close;
        }
        if (waited == slot_wait::drained) {
            co_return co_await answer_drained(c, r, std::nullopt);
        }
        if (waited == slot_wait::timed_out) {
            r.limiter.give_up();
        }
        note_decision(r);
    }
    if (verdict.what == verdict::kind::rejected || verdict.what == verdict::kind::failed_closed) {
        early = early_end{r.limiter.refusal(), false};
        auto e = co_await answer(c, r, *early->reply, false);
        co_return e;
    }
    if (verdict.what == verdict::kind::delayed) {
        // Held until its slot, then forwarded, unless the client leaves meanwhile (never
        // forwarded): without this coroutine and the request's memory when it can be
        // (`suspend_hold`; `resume_request` goes on after the hold), else here rather than in a
        // coroutine of its own: a held request would keep that frame too (456 bytes, with its
        // own forward_args and forward_result).
        begin_hold(c, r);
        const auto until = steady_clock::now() + r.record.delay;
        if (!c.w.outlasts_drain(until) && suspend_hold(c, m, until)) {
            co_return ending::held;
        }
        const auto end = co_await hold(c, m.scratch, until);
        hold_ended(c, r, end);
        if (end == hold_end::left) {
            co_return ending::close;
        }
        if (end == hold_end::drained) {
            co_return co_await answer_drained(c, r, until);
        }
    }
    auto args = forward_args_for(c, r, m.scratch);
    forward_result result;
    co_await forward(args, result);
    co_return forwarded(r, result);
}

awaitable<ending> resume_request(connection_state& c, request_memory& m) {
    const auto resumed = resume_hold(c, m);
    if (!resumed) {
        co_return ending::close;
    }
    auto& r = *m.state;
    auto end = hold_end::over;
    if (resumed->goes_on) {
        end = co_await hold(c, m.scratch, resumed->until);
    }
    hold_ended(c, r, end);
    if (end == hold_end::left) {
        co_return ending::close;
    }
    if (end == hold_end::drained) {
        co_return co_await answer_drained(c, r, resumed->until);
    }
    auto args = forward_args_for(c, r, m.scratch);
    forward_result result;
    co_await forward(args, result);
    co_return forwarded(r, result);
}

void finish_request(connection_state& c, request_state& r) {
    count_request(c, r);
    log_access(c, r);
}

void drop_held(connection_state& c) {
    request_memory m;
    m.state.emplace(c.held->cfg, c.w.metrics->request_body_buffer_bytes);
    // The limiter made again goes with `m`: its destructor gives back and settles.
    (void)resume_hold(c, m);
}

} // namespace sluice::http::detail
