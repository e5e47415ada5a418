// SPDX-License-Identifier: Apache-2.0
// The worker's pool of request memory (session_state_detail.hpp): a connection borrows the read
// buffer's storage only while it serves a request, keeps the bytes of a pipelined next request,
// and the pool keeps a bounded number of spares.
#include "http/session_state_detail.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace sluice::http::detail {
namespace {

void put(beast::flat_buffer& buffer, const std::string& bytes) {
    const auto room = buffer.prepare(bytes.size());
    std::memcpy(room.data(), bytes.data(), bytes.size());
    buffer.commit(bytes.size());
}

std::string text_of(const beast::flat_buffer& buffer) {
    return {static_cast<const char*>(buffer.data().data()), buffer.size()};
}

TEST(RequestPool, AConnectionBorrowsTheBufferForOneRequestOnly) {
    request_pool pool;
    beast::flat_buffer connection;
    auto memory = pool.take();
    put(memory->buffer, "x");
    memory->buffer.consume(1);
    const auto* storage = memory->buffer.prepare(1).data();
    lend_buffer(connection, *memory);
    EXPECT_EQ(connection.prepare(1).data(), storage); // the pool's storage, not a new one
    EXPECT_EQ(memory->buffer.capacity(), 0u);
    put(connection, "GET / HTTP/1.1\r\n\r\n");
    connection.consume(connection.size()); // the request was parsed
    return_buffer(connection, *memory);
    EXPECT_EQ(connection.capacity(), 0u); // between requests the connection keeps none
    EXPECT_NE(memory->buffer.capacity(), 0u);
}

TEST(RequestPool, PipelinedBytesStayWithTheConnection) {
    request_pool pool;
    beast::flat_buffer connection;
    auto memory = pool.take();
    lend_buffer(connection, *memory);
    put(connection, "GET /next HTTP/1.1\r\n\r\n");
    return_buffer(connection, *memory);
    EXPECT_EQ(text_of(connection), "GET /next HTTP/1.1\r\n\r\n");
    pool.give_back(std::move(memory));
    // The next request's memory finds the connection's buffer in use and lends nothing.
    auto next = pool.take();
    lend_buffer(connection, *next);
    EXPECT_EQ(text_of(connection), "GET /next HTTP/1.1\r\n\r\n");
    connection.consume(connection.size());
    return_buffer(connection, *next);
    EXPECT_EQ(connection.capacity(), 0u);
}

TEST(RequestPool, AnEmptyBufferIsFreedWhenTheSpareHasStorage) {
    request_pool pool;
    beast::flat_buffer connection;
    put(connection, "abc");
    connection.consume(3);
    auto memory = pool.take();
    put(memory->buffer, "d");
    memory->buffer.consume(1);
    const auto* spare = memory->buffer.prepare(1).data();
    return_buffer(connection, *memory);
    EXPECT_EQ(connection.capacity(), 0u);
    EXPECT_EQ(memory->buffer.prepare(1).data(), spare);
}

TEST(RequestPool, KeepsABoundedNumberOfSparesAndReusesThem) {
    request_pool pool;
    std::vector<std::unique_ptr<request_memory>> taken;
    for (std::size_t i = 0; i < request_pool::max_kept + 5; ++i) {
        taken.push_back(pool.take());
    }
    const auto* last = taken.back().get();
    for (auto& memory : taken) {
        pool.give_back(std::move(memory));
    }
    // The first max_kept came back and are kept; the last 5 were freed.
    std::vector<std::unique_ptr<request_memory>> again;
    for (std::size_t i = 0; i < request_pool::max_kept; ++i) {
        again.push_back(pool.take());
        EXPECT_NE(again.back().get(), last);
    }
    const auto* first_kept = again.front().get();
    pool.give_back(std::move(again.front()));
    EXPECT_EQ(pool.take().get(), first_kept);
}

TEST(RequestPool, ALargeBufferIsNotKept) {
    request_pool pool;
    auto memory = pool.take();
    put(memory->buffer, std::string(request_pool::max_kept_buffer + 1, 'x'));
    memory->buffer.consume(memory->buffer.size());
    pool.give_back(std::move(memory));
    EXPECT_EQ(pool.take()->buffer.capacity(), 0u);
}

// A large header (an upstream's 60 KiB of Set-Cookie, a client's 16 KiB X-Forwarded-For) leaves
// no large string behind in a spare: up to 128 spares a worker would keep each one's capacity.
TEST(RequestPool, LargeHeaderStringsAreNotKept) {
    request_pool pool;
    auto memory = pool.take();
    const std::string large(request_pool::max_kept_buffer + 1, 'x');
    memory->header = large;
    memory->scratch.header = large;
    memory->scratch.lines = large;
    pool.give_back(std::move(memory));
    const auto spare = pool.take();
    EXPECT_LE(spare->header.capacity(), request_pool::max_kept_buffer);
    EXPECT_LE(spare->scratch.header.capacity(), request_pool::max_kept_buffer);
    EXPECT_LE(spare->scratch.lines.capacity(), request_pool::max_kept_buffer);
}

} // namespace
} // namespace sluice::http::detail
