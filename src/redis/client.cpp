// SPDX-License-Identifier: Apache-2.0
#include "sluice/redis/client.hpp"

#include "redis/asio_adapter_detail.hpp"
#include "redis/reply_detail.hpp"
#include "sluice/core/log_throttle.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/container/small_vector.hpp>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <random>

// The client is a small state machine around one hiredis context at a time:
//
//   idle -> [resolving] -> connecting -> connected -> (lost) -> waiting -> [resolving] -> ...
//
// Commands are accepted while connecting (hiredis buffers them until the socket is up) and
// connected; otherwise they fail at once. Every command sent is remembered in `pending_`, in
// send order, with its deadline. hiredis calls each command's callback exactly once: with the
// reply, or with NULL when the context goes away. One timer watches the oldest live deadline;
// a command that passes it completes with `redis_timeout` and keeps its slot, without handler,
// until its late reply (or NULL) arrives, so that replies keep matching commands. Deadlines are
// the send time plus one fixed timeout, hence non-decreasing along `pending_`: the timed-out
// entries always form a prefix of it, whose length is `expired_`.
//
// Nothing calls user code inline: completions are posted, so no handler can re-enter hiredis
// from inside one of its callbacks or destroy the client there.

namespace sluice::redis {
namespace {

using steady = std::chrono::steady_clock;
using handler_type = client::handler_type;

struct pending_command {
    std::uint64_t id = 0;
    steady::time_point deadline;
    handler_type handler; // empty once completed early (timed out)

    pending_command(std::uint64_t i, steady::time_point d, handler_type h)
        : id(i)
        , deadline(d)
        , handler(std::move(h)) {}

    pending_command(pending_command&&) noexcept = default;

    // Boost 1.81's any_completion_handler move-assignment wraps instead of moving; swap is safe.
    pending_command& operator=(pending_command&& other) noexcept {
        id = other.id;
        deadline = other.deadline;
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
        resolving,
        connecting,
        connected,
        waiting, // for the backoff timer
        stopped,
    };

    state(const executor& e, client_options o)
        : ex_(e)
        , opts_(std::move(o))
        , deadline_timer_(e)
        , connect_timer_(e)
        , backoff_timer_(e)
        , resolver_(e)
        , rng_(std::random_device{}()) {}

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
    void submit(const Command& command, handler_type h) {
        if (ac_ == nullptr || (phase_ != phase::connecting && phase_ != phase::connected) ||
            pending_.size() >= opts_.max_pending) {
            complete(std::move(h), errc::redis_unavailable);
            return;
        }
        send(command, std::move(h));
        if (phase_ == phase::connected && ac_ != nullptr) {
            // Write now, not when the reactor next reports the socket writable: on a busy worker
            // that is one more pass through every ready handler, added to each command's round
            // trip. Safe here: this is a user's call, never inside a hiredis callback. A write
            // error disconnects (the pending commands complete as unavailable); what does not
            // fit in the socket waits for writability as before.
            redisAsyncHandleWrite(ac_);
        }
    }

    void send(std::span<const std::string> args, handler_type h) {
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
        track(rc, id, std::move(h));
    }

    void send(std::string_view resp, handler_type h) {
        if (resp.empty()) {
            complete(std::move(h), net::error::invalid_argument);
            return;
        }
        const std::uint64_t id = next_id_++;
        const int rc = redisAsyncFormattedCommand(
            ac_, &state::on_reply, id_to_privdata(id), resp.data(), resp.size());
        track(rc, id, std::move(h));
    }

    // Remembers a command hiredis accepted (rc) until its reply or its deadline.
    void track(int rc, std::uint64_t id, handler_type h) {
        if (rc != REDIS_OK) { // disconnecting: the callback will not run
            complete(std::move(h), errc::redis_unavailable);
            return;
        }
        const auto deadline = opts_.command_timeout.count() > 0
                                  ? steady::now() + opts_.command_timeout
                                  : steady::time_point::max();
        pending_.emplace_back(id, deadline, std::move(h));
        arm_deadline();
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
        const error_code ec = r.is_error() ? make_error_code(errc::bad_reply) : error_code{};
        complete(std::move(h), ec, std::move(r));
    }

    // Wakes at the oldest live deadline, or when the oldest timed-out command would prove the
    // connection stalled, whichever comes first. An armed wake that is later than that is moved
    // earlier: while every command has timed out the timer waits for the stall check, up to
    // `stall_timeout` away, and a command sent meanwhile must still time out at its own deadline.
    void arm_deadline() {
        auto wake = steady::time_point::max();
        if (expired_ < pending_.size()) {
            wake = pending_[expired_].deadline;
        }
        if (expired_ > 0) {
            wake = std::min(wake, pending_.front().deadline + opts_.stall_timeout);
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
        while (expired_ < pending_.size() && pending_[expired_].deadline <= now) {
            handler_type h(std::move(pending_[expired_].handler));
            ++expired_;
            if (h) {
                complete(std::move(h), errc::redis_timeout);
            }
        }
        if (expired_ > 0 && ac_ != nullptr && phase_ == phase::connected &&
            now >= pending_.front().deadline + opts_.stall_timeout) {
            drop_stalled();
            return;
        }
        arm_deadline();
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
        schedule_reconnect();
    }

    // AUTH, SELECT and the connect commands: their replies are checked, not awaited.
    void send_preamble() {
        if (!opts_.password.empty()) {
            std::vector<std::string> auth{"AUTH"};
            if (!opts_.username.empty()) {
                auth.push_back(opts_.username);
            }
            auth.push_back(opts_.password);
            send(auth, checker("AUTH"));
        }
        if (opts_.db != 0) {
            const std::vector<std::string> select{"SELECT", std::to_string(opts_.db)};
            send(select, checker("SELECT"));
        }
        for (const auto& command : connect_commands_) {
            send(command, checker(command.front() + ' ' + (command.size() > 1 ? command[1] : "")));
        }
    }

    static handler_type checker(std::string what) {
        return [what = std::move(what)](error_code ec, reply r) {
            if (ec == errc::bad_reply) {
                static log_throttle throttle;
                log_throttled(throttle, spdlog::level::err, "redis: {} failed: {}", what, r.str);
            }
        };
    }

    //--------------------------------------------------------------------------
    // Connection

    void connect() {
        if (is_unix()) {
            open(opts_.host);
            return;
        }
        error_code ec;
        const auto address = net::ip::make_address(opts_.host, ec);
        if (!ec) {
            open(address.to_string());
            return;
        }
        // A host name: resolve it without blocking the worker (redisAsyncConnect would).
        phase_ = phase::resolving;
        resolver_.async_resolve(
            opts_.host,
            std::to_string(opts_.port),
            [self = shared_from_this()](error_code e, const tcp::resolver::results_type& r) {
                self->on_resolved(e, r);
            });
    }

    void on_resolved(error_code ec, const tcp::resolver::results_type& results) {
        if (phase_ != phase::resolving) {
            return;
        }
        if (ec || results.empty()) {
            connection_failed("cannot resolve: " + (ec ? ec.message() : "no address"));
            return;
        }
        open(results.begin()->endpoint().address().to_string());
    }

    void open(const std::string& address) {
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

        connect_timer_.expires_after(opts_.connect_timeout);
        connect_timer_.async_wait([self = shared_from_this(), g = generation_](error_code ec) {
            if (!ec) {
                self->on_connect_timeout(g);
            }
        });
        send_preamble();
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
            connection_failed(why);
            return;
        }
        phase_ = phase::connected;
        ++connections_;
        attempt_ = 0;
        connect_timer_.cancel();
        if (outage_logged_) {
            // A flapping Redis would otherwise write one of these per flap.
            static log_throttle throttle;
            log_throttled(throttle, spdlog::level::info, "redis: reconnected to {}", where());
            outage_logged_ = false;
        } else {
            spdlog::debug("redis: connected to {}", where());
        }
    }

    static void on_disconnect(const redisAsyncContext* ac, int status) {
        if (auto* self = static_cast<state*>(ac->data)) {
            self->handle_disconnect(status == REDIS_OK,
                                    ac->errstr != nullptr ? ac->errstr : "closed");
        }
    }

    void handle_disconnect(bool clean, const std::string& why) {
        ac_ = nullptr;
        // Only a loss we did not cause reconnects (not stop(), shutdown() or drop_stalled()).
        if (phase_ != phase::connected) {
            return;
        }
        static log_throttle throttle;
        log_throttled(throttle,
                      spdlog::level::warn,
                      "redis: connection to {} lost: {}",
                      where(),
                      clean ? "closed" : why);
        outage_logged_ = true;
        schedule_reconnect();
    }

    void on_connect_timeout(std::uint64_t generation) {
        if (generation != generation_ || phase_ != phase::connecting || ac_ == nullptr) {
            return;
        }
        redisAsyncContext* c = ac_;
        ac_ = nullptr;
        redisAsyncFree(c); // its commands complete with redis_unavailable
        connection_failed("connect timed out");
    }

    void connection_failed(const std::string& why) {
        if (phase_ == phase::stopped) {
            return;
        }
        // One warning per outage; the retries that follow are debug noise.
        if (!outage_logged_) {
            static log_throttle throttle;
            log_throttled(
                throttle, spdlog::level::warn, "redis: cannot connect to {}: {}", where(), why);
            outage_logged_ = true;
        } else {
            spdlog::debug("redis: cannot connect to {}: {}", where(), why);
        }
        schedule_reconnect();
    }

    // Exponential backoff with "equal jitter": half the ceiling fixed, half random, so that the
    // workers and sluice instances that lost Redis together do not all return at one instant.
    void schedule_reconnect() {
        phase_ = phase::waiting;
        const auto ceiling =
            std::min(opts_.reconnect_max, opts_.reconnect_min * (std::int64_t{1} << attempt_));
        attempt_ = std::min(attempt_ + 1, 20U);
        const std::int64_t half = ceiling.count() / 2;
        std::uniform_int_distribution<std::int64_t> jitter(0, ceiling.count() - half);
        backoff_timer_.expires_after(milliseconds{half + jitter(rng_)});
        backoff_timer_.async_wait([self = shared_from_this()](error_code ec) {
            if (!ec && self->phase_ == phase::waiting) {
                self->connect();
            }
        });
    }

    void stop() {
        if (phase_ == phase::stopped) {
            return;
        }
        const bool was_connected = phase_ == phase::connected;
        phase_ = phase::stopped;
        connect_timer_.cancel();
        backoff_timer_.cancel();
        resolver_.cancel();
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
    }

    void shutdown() {
        phase_ = phase::stopped;
        deadline_timer_.cancel();
        connect_timer_.cancel();
        backoff_timer_.cancel();
        resolver_.cancel();
        if (ac_ != nullptr) {
            redisAsyncContext* c = ac_;
            ac_ = nullptr;
            redisAsyncFree(c); // runs every pending callback with a NULL reply
        }
    }

    executor ex_;
    client_options opts_;
    net::steady_timer deadline_timer_;
    net::steady_timer connect_timer_;
    net::steady_timer backoff_timer_;
    tcp::resolver resolver_;
    std::minstd_rand rng_;
    redisAsyncContext* ac_ = nullptr;
    // Atomic only so that connected() may be read from another thread (readiness probes);
    // every write happens on the client's executor.
    std::atomic<phase> phase_{phase::idle};
    std::deque<pending_command> pending_;
    std::size_t expired_ = 0;
    bool deadline_armed_ = false;
    steady::time_point armed_wake_;
    std::uint64_t deadline_arms_ = 0; // tells a cancelled wait from the current one
    bool outage_logged_ = false;
    std::uint64_t next_id_ = 1;
    std::uint64_t generation_ = 0;
    std::uint64_t connections_ = 0;
    unsigned attempt_ = 0;
    std::vector<std::vector<std::string>> connect_commands_;
};

//------------------------------------------------------------------------------

client::client(executor ex, client_options options)
    : ex_(std::move(ex))
    , state_(std::make_shared<state>(ex_, std::move(options))) {}

client::~client() {
    state_->shutdown();
}

void client::start() {
    if (state_->phase_ == state::phase::idle) {
        state_->connect();
    }
}

void client::stop() {
    state_->stop();
}

void client::submit(std::span<const std::string> args, handler_type handler) {
    state_->submit(args, std::move(handler));
}

void client::submit_formatted(std::string_view command, handler_type handler) {
    state_->submit(command, std::move(handler));
}

void client::add_connect_command(std::vector<std::string> args) {
    auto& commands = state_->connect_commands_;
    if (args.empty() || std::find(commands.begin(), commands.end(), args) != commands.end()) {
        return;
    }
    commands.push_back(args);
    const auto p = state_->phase_.load();
    if (state_->ac_ != nullptr && (p == state::phase::connecting || p == state::phase::connected)) {
        state_->send(args, state::checker(args.front()));
    }
}

bool client::connected() const noexcept {
    return state_->phase_ == state::phase::connected;
}

std::uint64_t client::connection_count() const noexcept {
    return state_->connections_;
}

} // namespace sluice::redis
