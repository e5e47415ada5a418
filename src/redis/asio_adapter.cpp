// SPDX-License-Identifier: Apache-2.0
#include "redis/asio_adapter_detail.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <hiredis/async.h>

#include <memory>

// hiredis drives I/O through five hooks: add/del read, add/del write, cleanup. This adapter maps
// them onto readiness waits (`async_wait`) on a `posix::stream_descriptor` that wraps hiredis's
// fd without owning it. Each direction keeps two flags: `want_` (hiredis asked for it) and
// `in_flight_` (a wait is outstanding), so that the hooks are idempotent and at most one wait per
// direction is ever outstanding. The reactor re-arms the fd on every new wait (epoll_ctl MOD),
// so a socket that is already writable is reported at once; no zero-byte reads (`null_buffers`).
//
// Lifetime is the delicate part. hiredis calls `cleanup` while freeing the context, and that
// can happen inside `redisAsyncHandleRead` (an error reply, a lost connection), i.e. while one
// of our wait handlers is on the stack. So hiredis's reference (`self_`) is only one of several:
// each outstanding wait holds a shared_ptr too. `cleanup` detaches: it clears the hooks (0.14.1
// may call cleanup twice), forgets `ac_`, releases the fd (which cancels the waits; hiredis
// closes the fd right after) and drops `self_`. Handlers check `ac_` before touching hiredis.

namespace sluice::redis::detail {
namespace {

namespace net = boost::asio;
using error_code = boost::system::error_code;
using wait_type = net::posix::descriptor_base::wait_type;

class asio_adapter : public std::enable_shared_from_this<asio_adapter> {
public:
    asio_adapter(redisAsyncContext* ac, const net::any_io_executor& ex)
        : ac_(ac)
        , fd_(ex) {}

    ~asio_adapter() { release_fd(); }

    asio_adapter(const asio_adapter&) = delete;
    asio_adapter& operator=(const asio_adapter&) = delete;

    // Wraps hiredis's fd; false if the reactor refuses it.
    bool open() {
        error_code ec;
        fd_.assign(ac_->c.fd, ec);
        return !ec;
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
        self.start_write();
    }

    static void del_write(void* data) { from(data).want_write_ = false; }

    static void cleanup(void* data) { from(data).detach(); }

    void start_read() {
        if (ac_ == nullptr || !want_read_ || read_in_flight_) {
            return;
        }
        read_in_flight_ = true;
        fd_.async_wait(wait_type::wait_read,
                       [self = shared_from_this()](error_code ec) { self->on_readable(ec); });
    }

    void start_write() {
        if (ac_ == nullptr || !want_write_ || write_in_flight_) {
            return;
        }
        write_in_flight_ = true;
        fd_.async_wait(wait_type::wait_write,
                       [self = shared_from_this()](error_code ec) { self->on_writable(ec); });
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

    // Gives the fd back without closing it (hiredis closes it); cancels outstanding waits.
    void release_fd() {
        if (fd_.is_open()) {
            fd_.release();
        }
    }

    redisAsyncContext* ac_;
    net::posix::stream_descriptor fd_;
    std::shared_ptr<asio_adapter> self_;
    bool want_read_ = false;
    bool want_write_ = false;
    bool read_in_flight_ = false;
    bool write_in_flight_ = false;
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
