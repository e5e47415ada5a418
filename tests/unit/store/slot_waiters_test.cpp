// SPDX-License-Identifier: Apache-2.0
// The line of requests waiting for a CONCURRENCY slot: arrival order, one waiter woken per
// freed slot, a woken waiter that found no slot keeps its place, and a waiter that left is
// never woken.

#include "sluice/store/redis_store.hpp"
#include "sluice/store/slot_waiters.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::store {
namespace {

class SlotWaiters : public ::testing::Test {
protected:
    /// Joins the line of `key` as waiter `name`; its wake-up appends the name to `woken_`.
    slot_waiters::ticket join(const std::string& key, const std::string& name) {
        return waiters_.join(key, ioc_.get_executor(), [this, name] { woken_.push_back(name); });
    }

    /// Runs the posted wake-ups.
    std::vector<std::string> run() {
        ioc_.restart();
        ioc_.poll();
        return std::exchange(woken_, {});
    }

    net::io_context ioc_;
    slot_waiters waiters_;
    std::vector<std::string> woken_;
};

TEST_F(SlotWaiters, WakesOneWaiterPerFreedSlotInArrivalOrder) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    auto c = join("k", "c");
    EXPECT_EQ(waiters_.in_line("k"), 3u);
    EXPECT_EQ(waiters_.in_line("other"), 0u);
    EXPECT_EQ(waiters_.size(), 3u);
    EXPECT_TRUE(waiters_.notify("k"));
    EXPECT_EQ(run(), std::vector<std::string>{"a"});
    EXPECT_TRUE(waiters_.notify("k"));
    EXPECT_TRUE(waiters_.notify("k"));
    EXPECT_EQ(run(), (std::vector<std::string>{"b", "c"}));
    EXPECT_FALSE(waiters_.notify("other"));
}

// A slot that frees while every waiter is deciding (woken by an earlier one) is not lost: a
// waiter that finds no slot tries once more when it rearms, instead of waiting for the next
// recheck; there is at most one such retry per waiter.
TEST_F(SlotWaiters, ASlotFreedWhileEveryWaiterDecidesIsNotLost) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    waiters_.notify("k");
    waiters_.notify("k");
    EXPECT_EQ(run(), (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(waiters_.notify("k")) << "a retry for the line";
    EXPECT_TRUE(waiters_.notify("k")) << "and another";
    EXPECT_FALSE(waiters_.notify("k")) << "one retry per waiter at most";
    EXPECT_TRUE(a.rearm()) << "a slot freed while a decided";
    EXPECT_TRUE(b.rearm());
    EXPECT_FALSE(a.rearm()) << "the retries are used up";
    EXPECT_FALSE(b.rearm());
    EXPECT_TRUE(run().empty()) << "trying again needs no wake-up";
    waiters_.notify("k");
    EXPECT_EQ(run(), std::vector<std::string>{"a"}) << "rearmed: woken as before";
}

TEST_F(SlotWaiters, AWaiterThatFoundNoSlotKeepsItsPlace) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    waiters_.notify("k");
    EXPECT_EQ(run(), std::vector<std::string>{"a"});
    EXPECT_FALSE(a.rearm()); // another instance took the slot first
    waiters_.notify("k");
    EXPECT_EQ(run(), std::vector<std::string>{"a"}) << "the oldest waiter goes first again";
}

TEST_F(SlotWaiters, AWaiterThatLeftIsNeverWoken) {
    auto a = join("k", "a");
    {
        auto b = join("k", "b");
        waiters_.notify("k");
        waiters_.notify("k"); // b's wake-up is posted ...
    }                         // ... and b leaves before it runs
    EXPECT_EQ(run(), std::vector<std::string>{"a"});
    EXPECT_EQ(waiters_.size(), 1u);
    a = slot_waiters::ticket{};
    EXPECT_EQ(waiters_.size(), 0u);
    EXPECT_EQ(waiters_.in_line("k"), 0u) << "an empty line is forgotten";
}

TEST_F(SlotWaiters, KeysHaveLinesOfTheirOwn) {
    auto a = join("k1", "a");
    auto b = join("k2", "b");
    waiters_.notify("k2");
    EXPECT_EQ(run(), std::vector<std::string>{"b"});
}

// A waiter that decides on its own (its recheck) gets no wake-up meanwhile: the decision may
// admit it, and the slot freed then must go to a waiter that is still waiting.
TEST_F(SlotWaiters, AWaiterDecidingOnItsOwnIsNotWoken) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    EXPECT_TRUE(a.begin_decision());
    EXPECT_TRUE(waiters_.notify("k"));
    EXPECT_EQ(run(), std::vector<std::string>{"b"}) << "b, not the deciding a";
    EXPECT_TRUE(waiters_.notify("k")) << "both busy: a retry for whoever finds no slot";
    a = slot_waiters::ticket{}; // a was admitted
    EXPECT_TRUE(b.rearm()) << "b found no slot, but one freed meanwhile";
    EXPECT_FALSE(b.rearm());
}

// Only the oldest waiter of a line rechecks, and not while a slot announced to another waiter is
// undecided: a younger waiter's recheck that fell as a slot freed took it ahead of the older one
// woken for it, which then found none.
TEST_F(SlotWaiters, OnlyTheOldestRechecksAndNotWhileAnAnnouncedSlotIsUndecided) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    EXPECT_FALSE(b.begin_decision()) << "a is older";
    EXPECT_TRUE(a.begin_decision());
    waiters_.notify("k"); // a is deciding: b is woken
    EXPECT_EQ(run(), std::vector<std::string>{"b"});
    EXPECT_FALSE(a.rearm()); // a decided before the slot freed
    EXPECT_FALSE(a.begin_decision()) << "the slot announced to b is b's";
    EXPECT_TRUE(b.begin_decision()) << "b decides on the slot announced to it";
    EXPECT_FALSE(b.rearm()); // it found none (another instance took it): back to waiting
    EXPECT_TRUE(a.begin_decision()) << "no slot announced is undecided";
}

// A waiter admitted by its own recheck (nothing announced: a lapsed lease) wakes the next, since
// only the oldest rechecks and such slots may be several (an instance died): so does each one
// admitted for such a wake-up, until one finds none. One admitted for a slot announced to it (a
// release) passes nothing on.
TEST_F(SlotWaiters, AWaiterAdmittedByItsRecheckWakesTheNextAndTheChainGoesOn) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    auto c = join("k", "c");
    auto d = join("k", "d");
    EXPECT_TRUE(a.begin_decision());
    a.admitted();
    EXPECT_EQ(run(), std::vector<std::string>{"b"});
    EXPECT_TRUE(b.begin_decision());
    b.admitted();
    EXPECT_EQ(run(), std::vector<std::string>{"c"}) << "b took a slot nobody announced either";
    EXPECT_TRUE(c.begin_decision());
    EXPECT_FALSE(c.rearm()); // c found none: the chain ends
    EXPECT_TRUE(run().empty());
    waiters_.notify("k"); // a release announces a slot
    EXPECT_EQ(run(), std::vector<std::string>{"c"});
    EXPECT_TRUE(c.begin_decision());
    c.admitted();
    EXPECT_TRUE(run().empty()) << "c took the slot announced to it";
    EXPECT_EQ(waiters_.size(), 1u);
}

// A ticket moved from leaves the line with nothing: only the ticket it went to leaves it.
TEST_F(SlotWaiters, AMovedTicketLeavesOnce) {
    auto a = join("k", "a");
    {
        slot_waiters::ticket moved(std::move(a));
        EXPECT_EQ(waiters_.size(), 1u);
    }
    EXPECT_EQ(waiters_.size(), 0u);
}

// A woken waiter that gives up (its client left, its max-delay passed) passes the wake-up on.
TEST_F(SlotWaiters, AWokenWaiterThatGivesUpPassesItsWakeUpOn) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    auto c = join("k", "c");
    waiters_.notify("k");
    EXPECT_EQ(run(), std::vector<std::string>{"a"});
    a.give_up();
    EXPECT_EQ(run(), std::vector<std::string>{"b"}) << "a's slot is b's now";
    c.give_up(); // not woken: nothing to pass on
    EXPECT_TRUE(run().empty());
    EXPECT_EQ(waiters_.size(), 1u);
}

// A waiter that decided on its own (its recheck), with no slot announced to it, passes nothing on
// when it gives up: a wake-up then would cost the next waiter a decision for no slot (a Redis
// round trip), and a line of waiters refused by another limit would chain them one by one.
TEST_F(SlotWaiters, AWaiterThatOnlyRecheckedPassesNothingOnWhenItGivesUp) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    EXPECT_TRUE(a.begin_decision());
    a.give_up();
    EXPECT_TRUE(run().empty());
    waiters_.notify("k");
    EXPECT_EQ(run(), std::vector<std::string>{"b"}) << "b is woken for a slot that frees";
}

// A slot that freed while every waiter was busy is a newcomer's to try at once: left as a retry,
// it waited for a busy waiter to be refused, and a waiter that was admitted took none, so the
// slot stayed free until the newcomer's recheck.
TEST_F(SlotWaiters, ANewcomerIsWokenForARetryLeftWhileEveryWaiterWasBusy) {
    auto a = join("k", "a");
    waiters_.notify("k"); // a woken: busy
    waiters_.notify("k"); // a second slot frees: kept as a retry
    EXPECT_EQ(run(), std::vector<std::string>{"a"});
    auto b = join("k", "b");
    a = {}; // admitted: it leaves with one slot, the other is b's
    EXPECT_EQ(run(), std::vector<std::string>{"b"});
    EXPECT_FALSE(b.rearm()) << "the retry was b's wake-up, not a second one";
}

// What Redis announces for a call that freed slots ("<count>:<key>", src/redis/slots.lua) wakes
// up to <count> waiters of that key; anything else wakes nobody.
TEST_F(SlotWaiters, RedisAnnouncementsWakeUpToTheirCount) {
    auto a = join("k", "a");
    auto b = join("k", "b");
    auto c = join("k", "c");
    auto d = join("a:b", "d");
    EXPECT_EQ(redis_store::wake_waiters(waiters_, "2:k"), 2u);
    EXPECT_EQ(run(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(redis_store::wake_waiters(waiters_, "1:a:b"), 1u) << "a key may hold ':'";
    EXPECT_EQ(run(), std::vector<std::string>{"d"});
    for (const auto* bad : {"", "k", ":k", "x:k", "1x:k", "-1:k", "12345678901:k", "1:other"}) {
        EXPECT_EQ(redis_store::wake_waiters(waiters_, bad), 0u) << bad;
    }
    EXPECT_TRUE(run().empty());
    EXPECT_EQ(redis_store::wake_waiters(waiters_, "1:k"), 1u);
    EXPECT_EQ(run(), std::vector<std::string>{"c"});
}

} // namespace
} // namespace sluice::store
