// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/slot_waiters.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <deque>

namespace sluice::store {

struct slot_waiters::node {
    io_executor ex;
    /// Cleared when the ticket leaves; only ever read and cleared on `ex`'s thread.
    std::function<void()> wake;
    /// Woken, or deciding on its own: no wake-up for it. Guarded by the registry's mutex.
    bool busy = false;
    /// Busy for a slot announced to it (woken, or a retry taken): a slot it leaves without is
    /// the next waiter's. Guarded by the registry's mutex.
    bool woken = false;
    /// Woken by a pass-on after a recheck found a slot nobody announced (`admitted`): admitted
    /// in turn, it passes on too. Guarded by the registry's mutex.
    bool chained = false;
    std::string key;
};

struct slot_waiters::line {
    std::deque<std::shared_ptr<node>> waiters;
    /// Slots freed while every waiter was busy, for the next refused waiters to try again.
    std::size_t retries = 0;
    /// Waiters that are `woken`: a slot was announced to them and they have not decided on it.
    std::size_t announced = 0;
};

slot_waiters::slot_waiters() = default;
slot_waiters::~slot_waiters() = default;

slot_waiters::ticket::ticket(ticket&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr))
    , node_(std::move(other.node_)) {}

slot_waiters::ticket& slot_waiters::ticket::operator=(ticket&& other) noexcept {
    if (this != &other) {
        leave();
        owner_ = std::exchange(other.owner_, nullptr);
        node_ = std::move(other.node_);
    }
    return *this;
}

slot_waiters::ticket::~ticket() {
    leave();
}

bool slot_waiters::ticket::begin_decision() {
    if (owner_ == nullptr) {
        return true;
    }
    std::lock_guard lock(owner_->mutex_);
    if (!node_->woken) {
        // A ticket in a line always has its line: it goes only with its last waiter.
        const auto& l = *owner_->lines_.find(node_->key)->second;
        if (l.announced > 0 || l.waiters.front() != node_) {
            return false;
        }
    }
    node_->busy = true;
    return true;
}

void slot_waiters::ticket::give_up() {
    if (owner_ == nullptr) {
        return;
    }
    auto* owner = owner_;
    std::string key = node_->key;
    // Read as it leaves, under one lock: a notify between a reading and the leaving would wake
    // this waiter (idle when read) and the wake-up would leave with it.
    if (const auto was = leave(); was.woken) {
        owner->wake_oldest(key, was.chained);
    }
}

void slot_waiters::ticket::admitted() {
    if (owner_ == nullptr) {
        return;
    }
    auto* owner = owner_;
    std::string key = node_->key;
    // Found by its own recheck, where nothing was announced (a lapsed lease, a lost
    // announcement), or for such a pass-on: more such slots may be free, and only the oldest
    // waiter rechecks.
    if (const auto was = leave(); !was.woken || was.chained) {
        owner->wake_oldest(key, true);
    }
}

bool slot_waiters::ticket::rearm() {
    if (owner_ == nullptr) {
        return false;
    }
    std::lock_guard lock(owner_->mutex_);
    // A ticket in a line always has its line: it goes only with its last waiter.
    auto& l = *owner_->lines_.find(node_->key)->second;
    if (l.retries > 0) {
        --l.retries;
        if (!node_->woken) {
            node_->woken = true;
            ++l.announced;
        }
        return true;
    }
    if (node_->woken) {
        node_->woken = false;
        --l.announced;
    }
    node_->chained = false; // it found none: the chain ends here
    node_->busy = false;
    return false;
}

slot_waiters::ticket::left slot_waiters::ticket::leave() noexcept {
    if (owner_ == nullptr) {
        return {};
    }
    node_->wake = nullptr; // a wake-up already posted finds nothing to run
    std::lock_guard lock(owner_->mutex_);
    const bool woken = node_->woken;
    const bool chained = node_->chained;
    const auto found = owner_->lines_.find(node_->key);
    if (found != owner_->lines_.end()) {
        auto& waiters = found->second->waiters;
        const auto it = std::find(waiters.begin(), waiters.end(), node_);
        if (it != waiters.end()) {
            waiters.erase(it);
            --owner_->size_;
            if (woken) {
                --found->second->announced;
            }
        }
        if (waiters.empty()) {
            owner_->lines_.erase(found);
        }
    }
    owner_ = nullptr;
    node_.reset();
    return {woken, chained};
}

slot_waiters::ticket
slot_waiters::join(std::string key, const io_executor& ex, std::function<void()> wake) {
    auto n = std::make_shared<node>(node{ex, std::move(wake), false, false, false, std::move(key)});
    bool woken = false;
    {
        std::lock_guard lock(mutex_);
        auto& l = lines_.try_emplace(n->key).first->second;
        if (!l) {
            l = std::make_unique<line>();
        }
        l->waiters.push_back(n);
        ++size_;
        // A slot freed while every waiter was busy is the newcomer's to try: left as a retry,
        // it would wait for a busy waiter to be refused, and one that is admitted takes none.
        if (l->retries > 0) {
            --l->retries;
            n->busy = true;
            n->woken = true;
            ++l->announced;
            woken = true;
        }
    }
    // The ticket first: were the post to throw (out of memory), the ticket would still take the
    // node out of the line.
    ticket t;
    t.owner_ = this;
    t.node_ = n;
    if (woken) {
        post_wake(n);
    }
    return t;
}

void slot_waiters::post_wake(const std::shared_ptr<node>& n) {
    net::post(n->ex, [weak = std::weak_ptr<node>(n)] {
        if (const auto locked = weak.lock(); locked && locked->wake) {
            locked->wake();
        }
    });
}

bool slot_waiters::notify(std::string_view key) {
    return wake_oldest(key, false);
}

bool slot_waiters::wake_oldest(std::string_view key, bool chained) {
    std::shared_ptr<node> chosen;
    {
        std::lock_guard lock(mutex_);
        const auto found = lines_.find(key);
        if (found == lines_.end()) {
            return false;
        }
        auto& l = *found->second;
        for (auto& n : l.waiters) {
            if (!n->busy) {
                n->busy = true;
                n->woken = true;
                n->chained = chained;
                ++l.announced;
                chosen = n;
                break;
            }
        }
        if (!chosen) {
            // Every waiter is deciding, perhaps on what it saw before this slot freed.
            if (l.retries >= l.waiters.size()) {
                return false;
            }
            ++l.retries;
            return true;
        }
    }
    post_wake(chosen);
    return true;
}

std::size_t slot_waiters::in_line(std::string_view key) const {
    std::lock_guard lock(mutex_);
    const auto found = lines_.find(key);
    return found == lines_.end() ? 0 : found->second->waiters.size();
}

std::size_t slot_waiters::size() const {
    std::lock_guard lock(mutex_);
    return size_;
}

} // namespace sluice::store
