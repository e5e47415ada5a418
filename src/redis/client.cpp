// SPDX-License-Identifier: Apache-2.0
#include "sluice/redis/client.hpp"

#include "redis/asio_adapter_detail.hpp"
#include "redis/reply_detail.hpp"
#include "sluice/core/log_excerpt.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/io/coarse_clock.hpp"
#include "sluice/redis/backoff.hpp"
#include "sluice/redis/command_writer.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/container/small_vector.hpp>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <queue>
#include <random>
#include <string_view>
#include <utility>

// The client is a small state machine around one hiredis context at a time:
//
//   idle -> [resolving] -> connecting -> setting_up -> connected -> (lost) -> waiting -> ...
//
// Resolving is the wait for a host name's first addresses (`address_cache`), within the connect
// timeout: once the name has addresses, even stale ones, a connect goes to them at once.
//
// Setting up a connection is AUTH, then (once AUTH succeeded) the connect check (ROLE, behind
// Sentinel), SELECT and the connect commands (SCRIPT LOAD), each reply awaited: nothing is
// pipelined behind an AUTH that may fail (Redis would answer it with NOAUTH, or with a protocol
// error for a large unauthenticated argument). The connection counts as established only when every
// set-up reply is a success. A failure at any step, or no answer within `connect_timeout`, drops
// the connection and waits the same backoff as a refused connect: a Redis that accepts connections
// but refuses the set-up (a wrong password, an ACL denying scripts, protected mode) would otherwise
// be reconnected to in a loop.
//
// Commands are accepted while connecting, setting up and connected; otherwise they fail at once.
// Until the set-up has succeeded they are held here, already formatted, and sent in order when
// it has (or failed as unavailable when it fails). Every command is remembered in `pending_`, in
// order, with its deadline. hiredis calls each command's callback exactly once: with the
// reply, or with NULL when the context goes away. One timer watches the oldest live deadline;
// a command that passes it completes with `redis_timeout` and keeps its slot, without handler,
// until its late reply (or NULL) arrives, so that replies keep matching commands. Deadlines are
// the send time plus one fixed timeout, hence non-decreasing along `pending_`: the entries the
// timer has passed always form a prefix of it, whose length is `expired_`. A command sent with
// a deadline of its own (`async_command_until`: a cluster map read, a redirected call) keeps
// that order's place too, and is also listed in `own_deadlines_`, which the timer watches as
// well: one due earlier times out then, and one due later is passed over by the prefix, its
// handler kept, until its own deadline. A worker may have thousands of redirected calls in
// flight, so that list is a min-heap, an answered command's entry left in it until it comes to
// the top, and a command is found by id with a binary search (`pending_` is in id order).
//
// Nothing calls user code inline: completions are posted, so no handler can re-enter hiredis
// from inside one of its callbacks or destroy the client there.
//
// One file, in sections (commands, set-up, subscription, connection) as hiredis's async.c is
// one: every transition reads and writes the same state (the phase, the context, `pending_`,
// the set-up steps), and a hiredis callback of one section may end in another's step, so split
// apart the state machine would be read in several places at once.

namespace sluice::redis {
namespace {

using steady = std::chrono::steady_clock;
using handler_type = client::handler_type;

struct pending_command {
    std::uint64_t id = 0;
    /// The send time plus `command_timeout`: the order of `pending_`.
    steady::time_point deadline;
    /// The caller's own deadline, which decides instead when set (`async_command_until`).
    std::optional<steady::time_point> own;
    handler_type handler; // empty once completed early (timed out)
    /// The command in RESP while it is held (the connection's set-up is not done); empty once
    /// handed to hiredis.
    std::string unsent;

    pending_command(std::uint64_t i,
                    steady::time_point d,
                    std::optional<steady::time_point> o,
                    handler_type h,
                    std::string held = {})
        : id(i)
        , deadline(d)
        , own(o)
        , handler(std::move(h))
        , unsent(std::move(held)) {}

    /// When it times out.
    steady::time_point due() const { return own ? *own : deadline; }

    pending_command(pending_command&&) noexcept = default;

    // Boost 1.81's any_completion_handler move-assignment wraps instead of moving; swap is safe.
    pending_command& operator=(pending_command&& other) noexcept {
        id = other.id;
        deadline = other.deadline;
        own = other.own;
        unsent = std::move(other.unsent);
        handler_type taken(std::move(other.handler));
        handler.swap(taken);
        return *this;
    }
};

void* id_to_privdata(std::uint64_t id) noexcept {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(id));
}

std::uint64_t privdata_to_id(void* privdata) noexcept {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(privdata));
}

// The command in RESP, to hold it until the connection's set-up is done.
std::string format_command(std::span<const std::string> args) {
    std::string out;
    command_writer w(out, args.size());
    for (const auto& a : args) {
        w.arg(std::string_view(a));
    }
    return out;
}

std::string format_command(std::string_view resp) {
    return std::string(resp);
}

/// How long a subscriber whose SUBSCRIBE Redis refused (NOPERM) waits before trying again: an
/// ACL changes rarely, and nothing is lost meanwhile but prompt wake-ups.
constexpr std::chrono::seconds refused_subscription_retry{30};

/// Connection failures and set-up refusals: each kind of line (a step and a server; a refusal's
/// error kind too) at most once per 10 s, shared by the workers (they all fail alike). Lines
/// that quote the server are keyed by kind, never by their text, which the server shapes.
keyed_log_throttle& connection_log() {
    static keyed_log_throttle throttle{std::chrono::seconds(10)};
    return throttle;
}

} // namespace

client_options client_options::from_settings(const config::redis_settings& settings) {
    client_options o;
    o.host = settings.host;
    o.port = settings.port;
    o.username = settings.username;
    o.password = settings.password;
    o.db = settings.db;
    o.command_timeout = settings.timeout;
    o.connect_timeout = settings.connect_timeout;
    o.stall_timeout = std::max(settings.connect_timeout, settings.timeout);
    return o;
}

//------------------------------------------------------------------------------

struct client::state : std::enable_shared_from_this<client::state> {
    enum class phase {
        idle,
        resolving,  // for a host name's first addresses (`addresses_`)
        connecting, // TCP (or unix) connect in progress
        setting_up, // connected; AUTH, SELECT or a connect command awaits its reply
        connected,  // set up: commands go straight to Redis
        waiting,    // for the backoff timer
        stopped,
    };

    state(const executor& e, client_options o)
        : ex_(e)
        , opts_(std::move(o))
        , deadline_timer_(e)
        , connect_timer_(e)
        , backoff_timer_(e)
        , addresses_(e, opts_.lookup, "redis", opts_.lookup_failures)
        , rng_(std::random_device{}())
        , backoff_(opts_.reconnect_min, opts_.reconnect_max) {}

    bool is_unix() const { return !opts_.host.empty() && opts_.host.front() == '/'; }

    std::string where() const {
        return is_unix() ? opts_.host : opts_.host + ':' + std::to_string(opts_.port);
    }

    void complete(handler_type h, error_code ec, reply r = {}) {
        net::post(ex_, net::append(std::move(h), ec, std::move(r)));
    }

    //--------------------------------------------------------------------------
    // Commands

    // `command` is an argument list or a RESP string (a formatted command).
    template <typename Command>
    void submit(const Command& command, handler_type h, std::optional<steady::time_point> own) {
        if (ac_ == nullptr ||
            (phase_ != phase::connecting && phase_ != phase::setting_up &&
             phase_ != phase::connected) ||
            pending_.size() >= opts_.max_pending) {
            complete(std::move(h), errc::redis_unavailable);
            return;
        }
        if (phase_ != phase::connected) {
            hold(command, std::move(h), own);
            return;
        }
        send(command, std::move(h), own);
        if (phase_ == phase::connected && ac_ != nullptr) {
            // Write now, not when the reactor next reports the socket writable: on a busy worker
            // that is one more pass through every ready handler, added to each command's round
            // trip. Safe here: this is a user's call, never inside a hiredis callback. A write
            // error disconnects (the pending commands complete as unavailable); what does not
            // fit in the socket waits for writability as before.
            redisAsyncHandleWrite(ac_);
        }
    }

    void send(std::span<const std::string> args,
              handler_type h,
              std::optional<steady::time_point> own = {}) {
        if (args.empty()) {
            complete(std::move(h), net::error::invalid_argument);
            return;
        }
        boost::container::small_vector<const char*, 16> argv;
        boost::container::small_vector<std::size_t, 16> lengths;
        for (const auto& a : args) {
            argv.push_back(a.data());
            lengths.push_back(a.size());
        }
        const std::uint64_t id = next_id_++;
        const int rc = redisAsyncCommandArgv(ac_,
                                             &state::on_reply,
                                             id_to_privdata(id),
                                             static_cast<int>(argv.size()),
                                             argv.data(),
                                             lengths.data());
        track(rc, id, std::move(h), own);
    }

    void send(std::string_view resp, handler_type h, std::optional<steady::time_point> own) {
        if (resp.empty()) {
            complete(std::move(h), net::error::invalid_argument);
            return;
        }
        const std::uint64_t id = next_id_++;
        const int rc = redisAsyncFormattedCommand(
            ac_, &state::on_reply, id_to_privdata(id), resp.data(), resp.size());
        track(rc, id, std::move(h), own);
    }

    // Remembers a command hiredis accepted (rc) until its reply or its deadline.
    void track(int rc, std::uint64_t id, handler_type h, std::optional<steady::time_point> own) {
        if (rc != REDIS_OK) { // disconnecting: the callback will not run
            complete(std::move(h), errc::redis_unavailable);
            return;
        }
        pending_.emplace_back(id, next_deadline(), own, std::move(h));
        watch_own(id, own);
        arm_deadline();
    }

    void watch_own(std::uint64_t id, std::optional<steady::time_point> own) {
        if (own) {
            own_deadlines_.emplace(*own, id);
        }
    }

    /// The command `id` while it is still waiting for its reply with a handler; null otherwise.
    pending_command* live(std::uint64_t id) {
        const auto it = std::lower_bound(
            pending_.begin(), pending_.end(), id, [](const pending_command& p, std::uint64_t i) {
                return p.id < i;
            });
        return it != pending_.end() && it->id == id && it->handler ? &*it : nullptr;
    }

    /// Drops the earliest own deadlines of commands answered or timed out, so that the one the
    /// timer is armed for is live: answered ones leave the heap here, not at their reply.
    void drop_settled_own_deadlines() {
        while (!own_deadlines_.empty() && live(own_deadlines_.top().second) == nullptr) {
            own_deadlines_.pop();
        }
    }

    steady::time_point next_deadline() const {
        return opts_.command_timeout.count() > 0 ? steady::now() + opts_.command_timeout
                                                 : steady::time_point::max();
    }

    // Keeps a command until the connection's set-up is done; it times out as a sent one would.
    template <typename Command>
    void hold(const Command& command, handler_type h, std::optional<steady::time_point> own) {
        if (command.empty()) {
            complete(std::move(h), net::error::invalid_argument);
            return;
        }
        const auto id = next_id_++;
        pending_.emplace_back(id, next_deadline(), own, std::move(h), format_command(command));
        watch_own(id, own);
        arm_deadline();
    }

    // The set-up succeeded: the held commands go to Redis, in order. One that timed out while
    // held is dropped, never sent: its caller has applied its failure mode (forwarded, refused,
    // or charged the memory store), and sent late it would charge Redis for a request decided
    // already, or take a concurrency slot nothing renews or gives back.
    void send_held() {
        const auto now = steady::now();
        for (std::size_t i = 0; i < pending_.size();) {
            auto& p = pending_[i];
            if (p.unsent.empty()) {
                ++i;
                continue;
            }
            if (p.handler && p.due() <= now) {
                // Due in this same turn, its timer not yet run: timed out, as it would be.
                complete(handler_type(std::move(p.handler)), errc::redis_timeout);
            }
            if (!p.handler) {
                pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
                if (i < expired_) {
                    --expired_;
                }
                continue;
            }
            const int rc = redisAsyncFormattedCommand(
                ac_, &state::on_reply, id_to_privdata(p.id), p.unsent.data(), p.unsent.size());
            if (rc != REDIS_OK) {
                break; // disconnecting: fail the rest below
            }
            p.unsent.clear();
            ++i;
        }
        fail_held();
    }

    // The connection that was being set up is gone: the held commands fail as unavailable. They
    // are the tail of `pending_` (the commands sent on the connection are answered, with NULL
    // replies, when it goes).
    void fail_held() {
        while (!pending_.empty() && !pending_.back().unsent.empty()) {
            handler_type h(std::move(pending_.back().handler));
            pending_.pop_back();
            if (h) {
                complete(std::move(h), errc::redis_unavailable);
            }
        }
        expired_ = std::min(expired_, pending_.size());
    }

    static void on_reply(redisAsyncContext* ac, void* raw, void* privdata) {
        if (auto* self = static_cast<state*>(ac->data)) {
            self->handle_reply(privdata_to_id(privdata), static_cast<redisReply*>(raw));
        }
    }

    void handle_reply(std::uint64_t id, const redisReply* raw) {
        // Replies come in send order, so this is the front entry; search only to be robust.
        std::size_t index = 0;
        while (index < pending_.size() && pending_[index].id != id) {
            ++index;
        }
        if (index == pending_.size()) {
            return;
        }
        handler_type h(std::move(pending_[index].handler));
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(index));
        if (index < expired_) {
            --expired_;
        }
        if (!h) {
            return; // timed out already: the late reply is dropped
        }
        if (raw == nullptr) {
            complete(std::move(h), errc::redis_unavailable);
            return;
        }
        reply r = detail::copy_reply(*raw);
        if (r.is_error() && r.str.starts_with("READONLY")) {
            trouble(); // a demoted primary: behind Sentinel, the switch may have been missed
        }
        const error_code ec = r.is_error() ? make_error_code(errc::bad_reply) : error_code{};
        complete(std::move(h), ec, std::move(r));
    }

    // Wakes at the oldest live deadline, or when the oldest timed-out command would prove the
    // connection stalled, whichever comes first. An armed wake that is later than that is moved
    // earlier: while every command has timed out the timer waits for the stall check, up to
    // `stall_timeout` away, and a command sent meanwhile must still time out at its own deadline.
    // The stall wake counts only when `expire()` would act on it: a wake it could not act on
    // would be re-armed at the same past instant, and fire at once, forever.
    void arm_deadline() {
        auto wake = steady::time_point::max();
        if (expired_ < pending_.size()) {
            wake = pending_[expired_].deadline;
        }
        // An answered command's deadline is no reason to wake (a stopped client's exit waits for
        // its timer).
        drop_settled_own_deadlines();
        if (!own_deadlines_.empty()) {
            wake = std::min(wake, own_deadlines_.top().first);
        }
        if (expired_ > 0 && can_drop_stalled()) {
            wake = std::min(wake, stalled_at());
        }
        if (wake == steady::time_point::max() || (deadline_armed_ && armed_wake_ <= wake)) {
            return;
        }
        deadline_armed_ = true;
        armed_wake_ = wake;
        // expires_at cancels a wait already armed: its handler sees a newer arm and does nothing.
        const auto arm = ++deadline_arms_;
        deadline_timer_.expires_at(wake);
        deadline_timer_.async_wait([self = shared_from_this(), arm](error_code ec) {
            if (arm != self->deadline_arms_) {
                return;
            }
            self->deadline_armed_ = false;
            if (ec != net::error::operation_aborted) {
                self->expire();
            }
        });
    }

    void expire() {
        const auto now = steady::now();
        while (!own_deadlines_.empty() && own_deadlines_.top().first <= now) {
            auto* p = live(own_deadlines_.top().second);
            own_deadlines_.pop(); // answered, failed or timed out now: no longer watched
            if (p != nullptr) {
                complete(handler_type(std::move(p->handler)), errc::redis_timeout);
            }
        }
        while (expired_ < pending_.size() && pending_[expired_].deadline <= now) {
            auto& p = pending_[expired_];
            ++expired_;
            if (p.due() > now) {
                continue; // its own deadline is later: own_deadlines_ watches it
            }
            handler_type h(std::move(p.handler));
            if (h) {
                complete(std::move(h), errc::redis_timeout);
            }
        }
        if (expired_ > 0 && can_drop_stalled() && now >= stalled_at()) {
            if (phase_ == phase::stopped) {
                drop_stopped();
            } else {
                drop_stalled();
            }
            return;
        }
        arm_deadline();
    }

    // When the connection counts as stalled if the front command is still unanswered:
    // stall_timeout after its ordinary deadline, also for a command with a later one of its own
    // (a map read, allowed connect-timeout: stall_timeout is at least that, so it is never cut
    // short), which would otherwise put off noticing a hung server by up to connect-timeout.
    steady::time_point stalled_at() const {
        const auto& front = pending_.front();
        return std::min(front.due(), front.deadline) + opts_.stall_timeout;
    }

    // A connection whose sent commands the stall check watches: one in use, or one that stop()
    // is draining (hiredis waits for every reply in flight, with no bound of its own).
    bool can_drop_stalled() const {
        return ac_ != nullptr && (phase_ == phase::connected || phase_ == phase::stopped);
    }

    // A stopped client's drain that a hung server never ends would keep the io_context, and so
    // the exit, waiting forever: drop it (its commands complete with NULL replies, timed out
    // already) once the oldest is as late as a stalled connection's.
    void drop_stopped() {
        static log_throttle throttle;
        log_throttled(throttle,
                      spdlog::level::warn,
                      "redis: {} left commands unanswered at stop; closing the connection",
                      where());
        redisAsyncContext* c = ac_;
        ac_ = nullptr;
        redisAsyncFree(c); // its disconnect callback, which runs inside, sees `stopped`
    }

    // TCP alone may take many minutes to give up on a hung peer; meanwhile every command would
    // time out. Drop the connection (its commands complete with NULL replies) and start over.
    void drop_stalled() {
        static log_throttle throttle;
        log_throttled(
            throttle, spdlog::level::warn, "redis: {} stopped answering; reconnecting", where());
        outage_logged_ = true;
        redisAsyncContext* c = ac_;
        ac_ = nullptr;
        phase_ = phase::waiting; // so that on_disconnect, which runs inside, does not reconnect
        redisAsyncFree(c);
        forget_failures_if_lasted();
        schedule_reconnect();
        trouble();
    }

    // Tells the owner (on_trouble) that the server may no longer be the right one.
    void trouble() {
        if (opts_.on_trouble) {
            net::post(ex_, opts_.on_trouble);
        }
    }

    // A set-up connection that then lasted resets the backoff: the next loss is a new outage.
    // One lost at once does not (Redis closing every connection right after accepting it, as
    // it does in protected mode when there is nothing to set up): that is a failure like the
    // others, and must not be retried at the shortest wait forever.
    void forget_failures_if_lasted() {
        if (steady::now() - connected_at_ >= opts_.reconnect_max) {
            backoff_.reset();
        }
    }

    //--------------------------------------------------------------------------
    // Set-up: AUTH, then SELECT and the connect commands

    void begin_setup() {
        setup_steps_.clear();
        if (!opts_.password.empty()) {
            std::vector<std::string> auth{"AUTH"};
            if (!opts_.username.empty()) {
                auth.push_back(opts_.username);
            }
            auth.push_back(opts_.password);
            send_setup(auth, "AUTH");
            return;
        }
        send_setup_rest();
    }

    // After AUTH (or without one): these may be pipelined, the connection is authenticated.
    void send_setup_rest() {
        if (opts_.check && !opts_.check->command.empty()) {
            send_setup(opts_.check->command, describe_command(opts_.check->command), true);
        }
        if (opts_.db != 0) {
            const std::vector<std::string> select{"SELECT", std::to_string(opts_.db)};
            send_setup(select, "SELECT");
        }
        for (const auto& command : connect_commands_) {
            send_setup(command.args,
                       describe_command(command.args),
                       false,
                       command.refused == if_refused::carry_on);
        }
    }

    static std::string describe_command(const std::vector<std::string>& command) {
        return command.size() > 1 ? command[0] + ' ' + command[1] : command[0];
    }

    void send_setup(std::span<const std::string> args,
                    std::string what,
                    bool check = false,
                    bool may_be_refused = false) {
        boost::container::small_vector<const char*, 4> argv;
        boost::container::small_vector<std::size_t, 4> lengths;
        for (const auto& a : args) {
            argv.push_back(a.data());
            lengths.push_back(a.size());
        }
        const int rc = redisAsyncCommandArgv(ac_,
                                             &state::on_setup_reply,
                                             id_to_privdata(generation_),
                                             static_cast<int>(argv.size()),
                                             argv.data(),
                                             lengths.data());
        if (rc == REDIS_OK) {
            setup_steps_.push_back({std::move(what), check, may_be_refused});
        }
    }

    static void on_setup_reply(redisAsyncContext* ac, void* raw, void* privdata) {
        if (auto* self = static_cast<state*>(ac->data)) {
            self->handle_setup_reply(privdata_to_id(privdata), static_cast<redisReply*>(raw));
        }
    }

    void handle_setup_reply(std::uint64_t generation, const redisReply* raw) {
        if (generation != generation_ || phase_ != phase::setting_up || setup_steps_.empty()) {
            return; // a connection given up already: its free answers its commands with NULL
        }
        const setup_step step = std::move(setup_steps_.front());
        const std::string& what = step.what;
        setup_steps_.pop_front();
        if (raw == nullptr) {
            return; // the connection is going: its disconnect callback says why
        }
        if (raw->type == REDIS_REPLY_ERROR && !step.may_be_refused) {
            setup_refused(what, detail::copy_reply(*raw));
            return;
        }
        if (step.check && opts_.check && opts_.check->verdict) {
            if (auto why = opts_.check->verdict(detail::copy_reply(*raw), where()); !why.empty()) {
                check_refused(why);
                return;
            }
        }
        if (what == "AUTH") {
            send_setup_rest();
        }
        if (setup_steps_.empty()) {
            setup_done();
        }
    }

    // Redis refused a step: say so once (the steps after it were not sent, or their errors
    // follow from this one), and give the connection up. Runs inside a hiredis reply callback,
    // where hiredis defers the free until the callback returns. The line is throttled by step,
    // server and error kind, not by its text: a server whose error text varies would otherwise
    // get every one through, and evict the other lines' counts.
    void setup_refused(const std::string& what, const reply& refusal) {
        std::string error = refusal.str;
        const auto key =
            "refused " + what + ' ' + where() + ' ' + std::string(refusal.error_kind());
        // Redis does not echo a password, but a proxy in front of it might. Masked in the whole
        // text, before log_excerpt bounds it (a password cut at the bound would show its start).
        if (!opts_.password.empty()) {
            constexpr std::string_view mask = "***";
            for (auto at = error.find(opts_.password); at != std::string::npos;
                 at = error.find(opts_.password, at + mask.size())) {
                error.replace(at, opts_.password.size(), mask);
            }
        }
        if (what == "AUTH") {
            log_throttled_by(connection_log(),
                             key,
                             spdlog::level::err,
                             "redis: authentication failed for user {} on {}: {}",
                             opts_.username.empty() ? "default" : opts_.username,
                             where(),
                             log_excerpt(error));
        } else {
            log_throttled_by(connection_log(),
                             key,
                             spdlog::level::err,
                             "redis: {} failed on {}, dropping the connection: {}",
                             what,
                             where(),
                             log_excerpt(error));
        }
        outage_logged_ = true;
        abandon("");
        trouble();
    }

    // The connect check refused the server (behind Sentinel: not the primary). As a refused
    // set-up: logged (throttled by server: `why` holds the server's reply), dropped, retried
    // after the backoff, and the owner told.
    void check_refused(const std::string& why) {
        log_throttled_by(connection_log(), "check " + where(), spdlog::level::warn, "{}", why);
        outage_logged_ = true;
        if (opts_.on_refused) {
            net::post(ex_,
                      [f = opts_.on_refused,
                       at = config::endpoint_address{opts_.host, opts_.port}] { f(at); });
        }
        abandon("");
        trouble();
    }

    void setup_done() {
        phase_ = phase::connected;
        ++connections_;
        connected_at_ = steady::now();
        connect_timer_.cancel();
        if (outage_logged_) {
            // A flapping Redis would otherwise write one of these per flap.
            static log_throttle throttle;
            log_throttled(throttle, spdlog::level::info, "redis: reconnected to {}", where());
            outage_logged_ = false;
        } else {
            spdlog::debug("redis: connected to {}", where());
        }
        if (!channel_.empty()) {
            subscribed_ = false;
            subscribe_now();
        }
        send_held();
    }

    //--------------------------------------------------------------------------
    // Subscription

    // hiredis keeps the callback of a SUBSCRIBE for its channel and calls it for the
    // confirmation and for every message after it, until the context goes (then with NULL).
    void subscribe_now() {
        std::array<const char*, 2> argv{"SUBSCRIBE", channel_.c_str()};
        const std::array<std::size_t, 2> lengths{9, channel_.size()};
        redisAsyncCommandArgv(ac_,
                              &state::on_message,
                              id_to_privdata(generation_),
                              static_cast<int>(argv.size()),
                              argv.data(),
                              lengths.data());
    }

    static void on_message(redisAsyncContext* ac, void* raw, void* privdata) {
        if (auto* self = static_cast<state*>(ac->data)) {
            self->handle_message(privdata_to_id(privdata), static_cast<redisReply*>(raw));
        }
    }

    // A message is ["message", channel, payload]; a confirmation ["subscribe", channel, count].
    void handle_message(std::uint64_t generation, const redisReply* raw) {
        if (raw == nullptr || generation != generation_ || raw->type != REDIS_REPLY_ARRAY ||
            raw->elements != 3 || raw->element[0]->type != REDIS_REPLY_STRING ||
            raw->element[2]->type == REDIS_REPLY_NIL) {
            return;
        }
        const std::string_view kind(raw->element[0]->str, raw->element[0]->len);
        if (kind == "subscribe") {
            subscribed_ = true;
            subscriptions_.fetch_add(1, std::memory_order_relaxed);
        } else if (kind == "message" && raw->element[2]->type == REDIS_REPLY_STRING &&
                   on_message_) {
            net::post(ex_,
                      [handler = on_message_,
                       payload = std::string(raw->element[2]->str, raw->element[2]->len)] {
                          handler(payload);
                      });
        }
    }

    // A connected command's error reply (a connect command added while connected) is logged:
    // the connection is up, and this command is not what keeps it usable.
    static handler_type checker(std::string what) {
        return [what = std::move(what)](error_code ec, reply r) {
            if (ec == errc::bad_reply) {
                // Keyed by command and error kind, not by the reply's text (see redis_store).
                log_throttled_by(connection_log(),
                                 what + ' ' + std::string(r.error_kind()),
                                 spdlog::level::err,
                                 "redis: {} failed: {}",
                                 what,
                                 log_excerpt(r.str));
            }
        };
    }

    // Gives up the connection being made or set up (its set-up commands complete with NULL
    // replies, ignored), fails the held commands and waits for the next attempt. `why` is
    // logged as a connect failure unless empty (already reported).
    void abandon(const std::string& why) {
        redisAsyncContext* c = ac_;
        ac_ = nullptr;
        phase_ = phase::waiting; // before the free: its disconnect callback must not reconnect
        connect_timer_.cancel();
        if (c != nullptr) {
            redisAsyncFree(c);
        }
        fail_held();
        if (why.empty()) {
            schedule_reconnect();
        } else {
            connection_failed(why);
        }
    }

    //--------------------------------------------------------------------------
    // Connection

    void connect() {
        // One deadline for the wait for an address, if any, the connect and the set-up.
        const auto deadline = steady::now() + opts_.connect_timeout;
        if (is_unix()) {
            open(opts_.host, deadline);
            return;
        }
        error_code ec;
        const auto address = net::ip::make_address(opts_.host, ec);
        if (!ec) {
            open(address.to_string(), deadline);
            return;
        }
        // A host name (redisAsyncConnect would resolve it blocking the worker): the addresses
        // last found, at once; before the first answer, the lookup's, within the deadline.
        if (const auto* found = addresses(); found != nullptr) {
            open(found->to_string(), deadline);
            return;
        }
        if (!addresses_.lookup_in_flight(opts_.host)) {
            unresolved(); // the last lookup failed; the next starts a second after it
            return;
        }
        phase_ = phase::resolving;
        // Its own signal per wait: one given up (retarget) may still be finishing.
        auto wait = std::make_shared<lookup_wait>();
        lookup_wait_ = wait;
        net::co_spawn(ex_,
                      addresses_.wait_for_lookup(opts_.host, deadline),
                      net::bind_cancellation_slot(
                          wait->signal.slot(),
                          [self = shared_from_this(), g = ++resolutions_, wait, deadline](
                              std::exception_ptr) {
                              // Done: a later emit would reach a finished coroutine's state.
                              wait->done = true;
                              if (self->lookup_wait_ == wait) {
                                  self->lookup_wait_.reset();
                              }
                              if (g == self->resolutions_) {
                                  self->on_looked_up(deadline);
                              }
                          }));
    }

    // The first of the host name's addresses (as Asio's resolver's first result was), or null
    // when none has been found yet. Starts a lookup when they are due: every `resolve_interval`,
    // and every second while the server cannot be reached, so that a Redis that came back at
    // another address (a container restarted) is found then. One lookup at a time, so a DNS that
    // hangs costs one thread, however often this asks.
    const net::ip::address* addresses() {
        const auto interval =
            outage_logged_
                ? std::min<milliseconds>(opts_.resolve_interval, address_cache::retry_after_failure)
                : opts_.resolve_interval;
        const auto& found = addresses_.addresses(opts_.host, interval, coarse_clock::now());
        return found.empty() ? nullptr : &found.front();
    }

    void on_looked_up(steady::time_point deadline) {
        if (phase_ != phase::resolving) {
            return;
        }
        if (const auto* found = addresses(); found != nullptr) {
            open(found->to_string(), deadline);
            return;
        }
        unresolved();
    }

    // No address for the host name: a failed connect, with its backoff; the lookup, if it goes
    // on, fills the cache for a later attempt.
    void unresolved() {
        const auto ec = addresses_.last_error(opts_.host);
        connection_failed("cannot resolve: " +
                          (ec ? ec.message() : "no answer within the connect timeout"));
    }

    // Gives up the wait for a lookup (not the lookup, which nothing can interrupt).
    void forget_lookup_wait() {
        ++resolutions_;
        if (auto wait = std::exchange(lookup_wait_, nullptr)) {
            // Emitted on the executor's thread, where Asio hands the cancellation on to the
            // coroutine at once. From another thread (the client destroyed after its worker's
            // loop, then the loop run again) Asio's co_spawn posts that hand-over with a pointer
            // into the signal, which the wait's end could free before the post ran: a
            // use-after-free AddressSanitizer caught in a test.
            net::dispatch(ex_, [wait = std::move(wait)] {
                if (!wait->done) {
                    wait->signal.emit(net::cancellation_type::terminal);
                }
            });
        }
    }

    void open(const std::string& address, steady::time_point deadline) {
        redisAsyncContext* c = is_unix() ? redisAsyncConnectUnix(address.c_str())
                                         : redisAsyncConnect(address.c_str(), opts_.port);
        if (c == nullptr) {
            connection_failed("out of memory");
            return;
        }
        if (c->err != 0 || !detail::attach_asio(c, ex_)) {
            const std::string why = c->err != 0 ? c->errstr : "cannot watch the socket";
            redisAsyncFree(c);
            connection_failed(why);
            return;
        }
        c->data = this;
        ac_ = c;
        ++generation_;
        phase_ = phase::connecting;
        if (!is_unix()) {
            // Probes after 15 s idle: a server that vanished without a reset is noticed in a
            // minute.
            redisEnableKeepAlive(&c->c);
        }
        redisAsyncSetConnectCallback(c, &state::on_connect);
        redisAsyncSetDisconnectCallback(c, &state::on_disconnect);

        connect_timer_.expires_at(deadline);
        connect_timer_.async_wait([self = shared_from_this(), g = generation_](error_code ec) {
            if (!ec) {
                self->on_connect_timeout(g);
            }
        });
        begin_setup();
    }

    static void on_connect(const redisAsyncContext* ac, int status) {
        if (auto* self = static_cast<state*>(ac->data)) {
            self->handle_connect(status == REDIS_OK, ac->errstr != nullptr ? ac->errstr : "");
        }
    }

    void handle_connect(bool ok, const std::string& why) {
        if (!ok) {
            // hiredis frees the context right after this; its commands get NULL replies.
            ac_ = nullptr;
            fail_held();
            connection_failed(why);
            return;
        }
        phase_ = phase::setting_up;
        if (setup_steps_.empty()) {
            setup_done(); // nothing to set up
        }
    }

    static void on_disconnect(const redisAsyncContext* ac, int status) {
        if (auto* self = static_cast<state*>(ac->data)) {
            // An error reply that no command awaits (REDIS_ERR_OTHER, with the reply's text) is
            // how hiredis reports a refused SUBSCRIBE, whose callback is not a command's; but
            // also Redis's "-ERR max number of clients reached" to a connection with nothing to
            // set up. Only a NOPERM (an ACL without the channel) is a refusal worth waiting out.
            const bool refused = status != REDIS_OK && ac->err == REDIS_ERR_OTHER &&
                                 ac->errstr != nullptr &&
                                 std::string_view(ac->errstr).starts_with("NOPERM");
            self->handle_disconnect(
                status == REDIS_OK, refused, ac->errstr != nullptr ? ac->errstr : "closed");
        }
    }

    void handle_disconnect(bool clean, bool refused, const std::string& why) {
        ac_ = nullptr;
        if (phase_ == phase::setting_up) {
            // Redis closed it before the set-up was done (protected mode, maxclients, a
            // protocol error): a set-up failure, with its backoff.
            phase_ = phase::waiting;
            fail_held();
            // Keyed without `why`, hiredis's text, which may quote the server's bytes.
            log_throttled_by(connection_log(),
                             "closed in set-up " + where(),
                             spdlog::level::warn,
                             "redis: {} closed the connection during its set-up: {}",
                             where(),
                             clean ? "closed" : log_excerpt(why));
            outage_logged_ = true;
            schedule_reconnect();
            trouble();
            return;
        }
        // Only a loss we did not cause reconnects (not stop(), shutdown() or drop_stalled()).
        if (phase_ != phase::connected) {
            return;
        }
        if (!channel_.empty() && !subscribed_ && refused) {
            // Redis refused the SUBSCRIBE (an ACL without the channel: NOPERM), and hiredis
            // drops a subscribed connection on an error reply. Retrying at the usual pace would
            // open a connection every half second for nothing: retry rarely, and say why. (A
            // connection lost before the confirmation came is only lost: reconnected as usual.)
            log_throttled_by(connection_log(),
                             "subscribe " + where(),
                             spdlog::level::err,
                             "redis: cannot subscribe to {} on {}: {}",
                             channel_,
                             where(),
                             clean ? "closed" : log_excerpt(why));
            outage_logged_ = true;
            schedule_reconnect(refused_subscription_retry);
            return;
        }
        log_throttled_by(connection_log(),
                         "lost " + where(),
                         spdlog::level::warn,
                         "redis: connection to {} lost: {}",
                         where(),
                         clean ? "closed" : log_excerpt(why));
        outage_logged_ = true;
        forget_failures_if_lasted();
        schedule_reconnect();
        trouble();
    }

    void on_connect_timeout(std::uint64_t generation) {
        if (generation != generation_ || ac_ == nullptr ||
            (phase_ != phase::connecting && phase_ != phase::setting_up)) {
            return;
        }
        abandon(phase_ == phase::connecting || setup_steps_.empty()
                    ? std::string("connect timed out")
                    : "no reply to " + setup_steps_.front().what + " within the connect timeout");
    }

    void connection_failed(const std::string& why) {
        if (phase_ == phase::stopped) {
            return;
        }
        // One warning per outage; the retries that follow are debug noise.
        if (!outage_logged_) {
            log_throttled(connection_log(),
                          spdlog::level::warn,
                          "redis: cannot connect to {}: {}",
                          where(),
                          why);
            outage_logged_ = true;
        } else {
            spdlog::debug("redis: cannot connect to {}: {}", where(), why);
        }
        schedule_reconnect();
        trouble();
    }

    // Any failure to get a connection set up waits here (see reconnect_backoff), or `wait`.
    void schedule_reconnect(std::optional<milliseconds> wait = std::nullopt) {
        phase_ = phase::waiting;
        backoff_timer_.expires_after(wait ? *wait : backoff_.next(rng_));
        backoff_timer_.async_wait([self = shared_from_this()](error_code ec) {
            if (!ec && self->phase_ == phase::waiting) {
                self->connect();
            }
        });
    }

    void retarget(std::string host, std::uint16_t port) {
        if (phase_ == phase::stopped ||
            (host == opts_.host && port == opts_.port && phase_ != phase::idle)) {
            return;
        }
        opts_.host = std::move(host);
        opts_.port = port;
        if (!started_ || opts_.host.empty()) {
            return;
        }
        // Drop what there is: commands sent on it complete with NULL replies (unavailable),
        // held ones fail, a resolution or a backoff in progress is forgotten.
        connect_timer_.cancel();
        backoff_timer_.cancel();
        forget_lookup_wait();
        if (ac_ != nullptr) {
            redisAsyncContext* c = ac_;
            ac_ = nullptr;
            phase_ = phase::waiting; // so that on_disconnect, which runs inside, does not reconnect
            redisAsyncFree(c);
        }
        fail_held();
        spdlog::debug("redis: moving to {}", where());
        // A new server: its first attempt is not a retry.
        backoff_.reset();
        connect();
    }

    void stop() {
        if (phase_ == phase::stopped) {
            return;
        }
        // Set up or being set up: hiredis has a connection to drain or to report.
        const bool was_connected = phase_ == phase::connected;
        phase_ = phase::stopped;
        connect_timer_.cancel();
        backoff_timer_.cancel();
        forget_lookup_wait();
        if (pending_.empty()) {
            // An armed deadline for commands already answered would keep the io_context (and
            // a draining sluice) running for up to a command timeout.
            deadline_timer_.cancel();
        }
        if (ac_ != nullptr) {
            redisAsyncContext* c = ac_;
            if (was_connected) {
                // Drains: replies in flight still arrive; hiredis frees the context after the
                // last one and reports it through on_disconnect, which clears ac_.
                redisAsyncDisconnect(c);
            } else {
                // Not connected, hiredis would free it without telling us: free it ourselves.
                ac_ = nullptr;
                redisAsyncFree(c);
            }
        }
        fail_held();
    }

    void shutdown() {
        phase_ = phase::stopped;
        deadline_timer_.cancel();
        connect_timer_.cancel();
        backoff_timer_.cancel();
        forget_lookup_wait();
        if (ac_ != nullptr) {
            redisAsyncContext* c = ac_;
            ac_ = nullptr;
            redisAsyncFree(c); // runs every pending callback with a NULL reply
        }
        fail_held();
    }

    executor ex_;
    client_options opts_;
    net::steady_timer deadline_timer_;
    net::steady_timer connect_timer_;
    net::steady_timer backoff_timer_;
    /// A host name's addresses. Destroyed with this state, just after the client (its handlers
    /// end at once then), which abandons a lookup stuck in DNS.
    address_cache addresses_;

    /// A wait for a lookup in progress (`resolving`), and whether it has ended.
    struct lookup_wait {
        net::cancellation_signal signal;
        bool done = false;
    };

    /// Cancels the wait for a lookup in progress.
    std::shared_ptr<lookup_wait> lookup_wait_;
    std::minstd_rand rng_;
    redisAsyncContext* ac_ = nullptr;
    // Atomic only so that connected() may be read from another thread (readiness probes);
    // every write happens on the client's executor.
    std::atomic<phase> phase_{phase::idle};
    std::deque<pending_command> pending_;
    std::size_t expired_ = 0;
    /// (deadline, id) of the commands sent with one of their own (`async_command_until`), the
    /// earliest on top; removed when due, or when on top and no longer live.
    using own_deadline = std::pair<steady::time_point, std::uint64_t>;
    std::priority_queue<own_deadline, std::vector<own_deadline>, std::greater<>> own_deadlines_;
    bool deadline_armed_ = false;
    steady::time_point armed_wake_;
    std::uint64_t deadline_arms_ = 0; // tells a cancelled wait from the current one
    bool outage_logged_ = false;
    std::uint64_t next_id_ = 1;
    std::uint64_t generation_ = 0;
    std::uint64_t resolutions_ = 0; // tells the current wait for a lookup from one given up
    std::uint64_t connections_ = 0;
    bool started_ = false;
    reconnect_backoff backoff_;
    steady::time_point connected_at_; // when the current connection's set-up completed

    /// A set-up command sent on the current connection: what it is ("AUTH", "SCRIPT LOAD"), and
    /// whether its reply goes to the connect check.
    struct setup_step {
        std::string what;
        bool check = false;
        /// An error reply does not fail the set-up (`if_refused::carry_on`).
        bool may_be_refused = false;
    };

    /// The set-up commands sent on the current connection, in send order, until their reply.
    std::deque<setup_step> setup_steps_;
    std::vector<connect_command> connect_commands_;
    /// The channel every connection subscribes to (`subscribe`); empty: none.
    std::string channel_;
    std::function<void(std::string)> on_message_;
    std::atomic<std::uint64_t> subscriptions_{0};
    /// Redis confirmed the current connection's SUBSCRIBE.
    bool subscribed_ = false;
};

//------------------------------------------------------------------------------

client::client(executor ex, client_options options)
    : ex_(std::move(ex))
    , state_(std::make_shared<state>(ex_, std::move(options))) {}

client::~client() {
    state_->shutdown();
}

void client::start() {
    auto& s = *state_;
    if (s.phase_ == state::phase::idle && !s.started_) {
        s.started_ = true;
        if (!s.opts_.host.empty()) {
            s.connect();
        }
    }
}

void client::retarget(std::string host, std::uint16_t port) {
    state_->retarget(std::move(host), port);
}

void client::stop() {
    state_->stop();
}

void client::submit(std::span<const std::string> args,
                    handler_type handler,
                    std::optional<std::chrono::steady_clock::time_point> deadline) {
    state_->submit(args, std::move(handler), deadline);
}

void client::submit_formatted(std::string_view command,
                              handler_type handler,
                              std::optional<std::chrono::steady_clock::time_point> deadline) {
    state_->submit(command, std::move(handler), deadline);
}

void client::add_connect_command(std::vector<std::string> args, if_refused refused) {
    auto& commands = state_->connect_commands_;
    if (args.empty() || std::any_of(commands.begin(), commands.end(), [&](const auto& c) {
            return c.args == args;
        })) {
        return;
    }
    commands.push_back({args, refused});
    const bool may_be_refused = refused == if_refused::carry_on;
    auto& s = *state_;
    const auto p = s.phase_.load();
    if (s.ac_ == nullptr) {
        return; // the next connection sends it
    }
    if (p == state::phase::connected) {
        if (may_be_refused) {
            s.send(args, [](error_code, reply) {});
        } else {
            s.send(args, state::checker(state::describe_command(args)));
        }
    } else if ((p == state::phase::connecting || p == state::phase::setting_up) &&
               std::none_of(s.setup_steps_.begin(), s.setup_steps_.end(), [](const auto& step) {
                   return step.what == "AUTH";
               })) {
        // Authenticated (or no AUTH): a set-up step of this connection too. While AUTH is
        // awaited, it goes out with the rest after it.
        s.send_setup(args, state::describe_command(args), false, may_be_refused);
    }
}

void client::subscribe(std::string channel, std::function<void(std::string)> on_message) {
    state_->channel_ = std::move(channel);
    state_->on_message_ = std::move(on_message);
}

std::uint64_t client::subscription_count() const noexcept {
    return state_->subscriptions_.load(std::memory_order_relaxed);
}

bool client::connected() const noexcept {
    return state_->phase_ == state::phase::connected;
}

std::uint64_t client::connection_count() const noexcept {
    return state_->connections_;
}

} // namespace sluice::redis
