// SPDX-License-Identifier: Apache-2.0
#include "redis/asio_adapter_detail.hpp"
#include "sluice/core/log_throttle.hpp"

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <array>
#include <memory>
#include <sys/socket.h>

// hiredis drives I/O through five hooks: add/del read, add/del write, cleanup. This adapter maps
// them onto the reactor through a socket object that wraps hiredis's fd without owning it. Each
// direction keeps two flags: `want_` (hiredis asked for it) and `in_flight_` (an operation is
// outstanding), so that the hooks are idempotent and at most one operation per direction is ever
// outstanding.
//
// Reads. Once connected, the adapter reads the replies itself, with Asio's read, feeds them to
// hiredis's reader and has hiredis run the reply callbacks. A wait for readability
// (`async_wait`) followed by hiredis's own read, as before the connection is up, re-arms the fd
// with an EPOLL_CTL_MOD each time: a system call per batch of replies that a read does without
// (bench/run counted 0.11 epoll_ctl per request on the Redis store, one per batch). The end of
// the stream and errors are left to hiredis's own read, which finds them too and disconnects as
// it always did.
//
// Not a drained read (sluice/io/drained_read.hpp), which would spare the read's first try (an
// EAGAIN per batch of replies: 0.046 system calls per request, one worker under wrk -c64): with
// it, a server that answers and closes at once (Redis in protected mode) was seen connected for
// good in about one run in six of
// `RedisClient.AConnectionClosedAtOnceIsRetriedOnTheBackoffSchedule` on this machine's kernel
// (6.18). Redis closes with our command unread, so its close is a reset, which came with the reply:
// the kernel counts nothing left behind the read that takes the reply, and no event follows
// (drained_read.hpp), so no read ever tried the socket again. With Asio's read, which does, none in
// 60 runs.
//
// Writes. hiredis asks for writability on every command it queues. Waiting for it costs an
// EPOLL_CTL_MOD too, for a socket that is nearly always writable; so once connected the request
// is answered by a posted call that writes (the client writes at once after its own commands,
// and then finds nothing left to do), and a wait is started only for what the socket did not
// take.
//
// Lifetime is the delicate part. hiredis calls `cleanup` while freeing the context, and that
// can happen inside `redisAsyncHandleRead` (an error reply, a lost connection), i.e. while one
// of our handlers is on the stack. So hiredis's reference (`self_`) is only one of several:
// each outstanding operation holds a shared_ptr too. `cleanup` detaches: it clears the hooks
// (0.14.1 may call cleanup twice), forgets `ac_`, releases the fd (which cancels the operations;
// hiredis closes the fd right after) and drops `self_`. Handlers check `ac_` before touching
// hiredis.

#if HIREDIS_MAJOR == 0 && HIREDIS_MINOR == 14
#define SLUICE_REDIS_OWN_READS 1
// Runs the callbacks of the replies in the reader: the second half of redisAsyncHandleRead (the
// first is its read). Exported by libhiredis but not declared by 0.14.1's headers (1.x declares
// it in async_private.h), hence the version guard.
extern "C" void redisProcessCallbacks(redisAsyncContext* ac);
#endif

namespace sluice::redis::detail {
namespace {

namespace net = boost::asio;
using error_code = boost::system::error_code;
using stream_socket = net::basic_stream_socket<net::generic::stream_protocol, net::any_io_executor>;

class asio_adapter : public std::enable_shared_from_this<asio_adapter> {
public:
    asio_adapter(redisAsyncContext* ac, const net::any_io_executor& ex)
        : ac_(ac)
        , socket_(ex) {}

    ~asio_adapter() { release_fd(); }

    asio_adapter(const asio_adapter&) = delete;
    asio_adapter& operator=(const asio_adapter&) = delete;

    // Wraps hiredis's fd (TCP or Unix, as its address family says); false if the reactor refuses
    // it.
    bool open() {
        ::sockaddr_storage address{};
        ::socklen_t length = sizeof(address);
        if (::getsockname(ac_->c.fd, reinterpret_cast<::sockaddr*>(&address), &length) != 0) {
            return false;
        }
        const int family = address.ss_family;
        error_code ec;
        socket_.assign(net::generic::stream_protocol(family, family == AF_UNIX ? 0 : IPPROTO_TCP),
                       ac_->c.fd,
                       ec);
        if (ec) {
            return false;
        }
        return true;
    }

    // Hands hiredis its hooks and its reference to this adapter.
    void install(std::shared_ptr<asio_adapter> self) {
        self_ = std::move(self);
        ac_->ev.data = this;
        ac_->ev.addRead = &asio_adapter::add_read;
        ac_->ev.delRead = &asio_adapter::del_read;
        ac_->ev.addWrite = &asio_adapter::add_write;
        ac_->ev.delWrite = &asio_adapter::del_write;
        ac_->ev.cleanup = &asio_adapter::cleanup;
    }

private:
    static asio_adapter& from(void* data) { return *static_cast<asio_adapter*>(data); }

    static void add_read(void* data) {
        auto& self = from(data);
        self.want_read_ = true;
        self.start_read();
    }

    static void del_read(void* data) { from(data).want_read_ = false; }

    static void add_write(void* data) {
        auto& self = from(data);
        self.want_write_ = true;
        if (self.connected()) {
            self.post_flush();
        } else {
            self.start_write(); // the connection's completion is reported as writability
        }
    }

    static void del_write(void* data) { from(data).want_write_ = false; }

    static void cleanup(void* data) { from(data).detach(); }

    bool connected() const { return ac_ != nullptr && (ac_->c.flags & REDIS_CONNECTED) != 0; }

    void start_read() {
        if (ac_ == nullptr || !want_read_ || read_in_flight_) {
            return;
        }
        read_in_flight_ = true;
#ifdef SLUICE_REDIS_OWN_READS
        if (connected()) {
            socket_.async_read_some(net::buffer(buffer_),
                                    [self = shared_from_this()](error_code ec, std::size_t n) {
                                        self->on_read(ec, n);
                                    });
            return;
        }
#endif
        socket_.async_wait(stream_socket::wait_read,
                           [self = shared_from_this()](error_code ec) { self->on_readable(ec); });
    }

    void start_write() {
        if (ac_ == nullptr || !want_write_ || write_in_flight_) {
            return;
        }
        write_in_flight_ = true;
        socket_.async_wait(stream_socket::wait_write,
                           [self = shared_from_this()](error_code ec) { self->on_writable(ec); });
    }

    // Writes from a handler of its own, never inside the hiredis call that asked (see the top).
    void post_flush() {
        if (write_in_flight_ || flush_posted_) {
            return;
        }
        flush_posted_ = true;
        net::post(socket_.get_executor(), [self = shared_from_this()] { self->flush(); });
    }

    void flush() {
        flush_posted_ = false;
        if (ac_ == nullptr || !want_write_ || write_in_flight_) {
            return;
        }
        redisAsyncHandleWrite(ac_); // may run `cleanup`
        start_write();              // what the socket did not take
    }

    void on_readable(error_code ec) {
        read_in_flight_ = false;
        if (ac_ == nullptr || ec == net::error::operation_aborted || !want_read_) {
            return;
        }
        // Any other error is left to hiredis: its read() fails and it disconnects. This call
        // may run `cleanup`; after it, `ac_` is null if the context is gone.
        redisAsyncHandleRead(ac_);
        start_read();
    }

#ifdef SLUICE_REDIS_OWN_READS
    void on_read(error_code ec, std::size_t n) {
        read_in_flight_ = false;
        if (ac_ == nullptr || ec == net::error::operation_aborted) {
            return;
        }
        if (ec || n == 0) {
            // The end of the stream or an error: hiredis's own read finds it as well (the end
            // again, or the error's end) and disconnects, with its message.
            redisAsyncHandleRead(ac_);
        } else {
            // A reader that refuses the bytes (out of memory) keeps its error, which the
            // callbacks' next reply then reports: hiredis disconnects as its own read would.
            redisReaderFeed(ac_->c.reader, buffer_.data(), n);
            redisProcessCallbacks(ac_); // may run `cleanup`
            if (ac_ != nullptr && reply_over_limit(n)) {
                static log_throttle throttle{std::chrono::seconds(10)};
                log_throttled(throttle,
                              spdlog::level::warn,
                              "redis: a reply of more than {} bytes; dropping the connection",
                              max_reply_bytes);
                // hiredis's own read then finds the end of the stream and disconnects, failing
                // the commands in flight as unavailable, as any lost connection does. Its close
                // resets the connection (linger 0): closed in order, with the server's bytes
                // still coming into a full window, the socket sat in FIN-WAIT-2 for a minute.
                const ::linger reset{1, 0};
                ::setsockopt(ac_->c.fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
                ::shutdown(ac_->c.fd, SHUT_RD);
            }
        }
        start_read();
    }

    /**
     * Whether the reply the reader is in the middle of has come to more than max_reply_bytes,
     * `n` bytes having just been fed. What the reader holds unparsed (a bulk string waits there
     * whole), plus, for an aggregate, every byte fed since it began: its elements are parsed as
     * they come. An aggregate is told from the next by its reply object, the reader's first
     * task (hiredis 0.14's read.h).
     */
    bool reply_over_limit(std::size_t n) {
        const redisReader& r = *ac_->c.reader;
        const void* aggregate = r.ridx >= 0 ? r.rstack[0].obj : nullptr;
        if (aggregate != aggregate_) {
            aggregate_ = aggregate;
            aggregate_bytes_ = 0;
        }
        if (aggregate != nullptr) {
            aggregate_bytes_ += n;
        }
        return aggregate_bytes_ + (r.len - r.pos) > max_reply_bytes;
    }
#endif

    void on_writable(error_code ec) {
        write_in_flight_ = false;
        if (ac_ == nullptr || ec == net::error::operation_aborted || !want_write_) {
            return;
        }
        redisAsyncHandleWrite(ac_);
        start_write();
    }

    void detach() {
        if (ac_ == nullptr) {
            return;
        }
        // hiredis 0.14.1 runs the cleanup hook twice on an error disconnect (once in
        // __redisAsyncDisconnect, once in __redisAsyncFree): with the hooks cleared, the second
        // call finds none and never reaches this (possibly freed) object.
        ac_->ev.data = nullptr;
        ac_->ev.addRead = nullptr;
        ac_->ev.delRead = nullptr;
        ac_->ev.addWrite = nullptr;
        ac_->ev.delWrite = nullptr;
        ac_->ev.cleanup = nullptr;
        ac_ = nullptr;
        want_read_ = false;
        want_write_ = false;
        release_fd();
        // Dropping hiredis's reference may destroy `this` when no wait is outstanding: last.
        auto last_reference = std::move(self_);
    }

    // Gives the fd back without closing it (hiredis closes it); cancels outstanding operations.
    void release_fd() {
        if (socket_.is_open()) {
            error_code ignored;
            socket_.release(ignored);
        }
    }

    redisAsyncContext* ac_;
    stream_socket socket_;
    std::shared_ptr<asio_adapter> self_;
    bool want_read_ = false;
    bool want_write_ = false;
    bool read_in_flight_ = false;
    bool write_in_flight_ = false;
    bool flush_posted_ = false;
#ifdef SLUICE_REDIS_OWN_READS
    // As hiredis's own read buffer.
    std::array<char, 16 * 1024> buffer_{};
    // The aggregate reply being read, and the bytes fed since it began (reply_over_limit).
    const void* aggregate_ = nullptr;
    std::size_t aggregate_bytes_ = 0;
#endif
};

} // namespace

bool attach_asio(redisAsyncContext* ac, const net::any_io_executor& ex) {
    if (ac == nullptr || ac->ev.data != nullptr || ac->c.fd < 0) {
        return false;
    }
    auto adapter = std::make_shared<asio_adapter>(ac, ex);
    if (!adapter->open()) {
        return false;
    }
    adapter->install(adapter);
    return true;
}

} // namespace sluice::redis::detail
