// SPDX-License-Identifier: Apache-2.0
// End-to-end forwarding through the real binary: bodies arrive byte-identical both ways,
// requests pass unchanged apart from hop-by-hop and forwarding headers, connections are reused
// and pipelined, and upstream failures become 502 and 504.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/limit_probe.hpp"
#include "support/one_connection_server.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kib = 1024;
constexpr std::uint64_t mib = 1024 * kib;

struct body_case {
    std::uint64_t size;
    bool chunked;
};

void PrintTo(const body_case& c, std::ostream* os) {
    *os << c.size << (c.chunked ? " bytes, chunked" : " bytes, Content-Length");
}

std::string body_case_name(const testing::TestParamInfo<body_case>& info) {
    return "Size" + std::to_string(info.param.size) +
           (info.param.chunked ? "Chunked" : "ContentLength");
}

const auto body_cases = testing::Values(body_case{0, false},
                                        body_case{1, false},
                                        body_case{64 * kib, false},
                                        body_case{1 * mib, false},
                                        body_case{64 * mib, false},
                                        body_case{0, true},
                                        body_case{1, true},
                                        body_case{64 * kib, true},
                                        body_case{1 * mib, true},
                                        body_case{64 * mib, true});

class UploadIntegrity : public testing::TestWithParam<body_case> {};

TEST_P(UploadIntegrity, RequestBodyArrivesByteIdentical) {
    const auto [size, chunked] = GetParam();
    const std::uint64_t seed = 1000 + size;
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));

    http_connection connection(sluice.port());
    const header_list framing = chunked ? header_list{{"Transfer-Encoding", "chunked"}}
                                        : header_list{{"Content-Length", std::to_string(size)}};
    connection.send_raw(format_request("POST", "/upload", framing));
    connection.send_pattern_body(seed, size, chunked);
    const http_response response = connection.read_response();

    EXPECT_EQ(response.status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(1, 10s));
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].method, "POST");
    EXPECT_EQ(requests[0].body_size, size);
    EXPECT_EQ(requests[0].body_hash, pattern_hash(seed, size));
}

INSTANTIATE_TEST_SUITE_P(Proxy, UploadIntegrity, body_cases, body_case_name);

class DownloadIntegrity : public testing::TestWithParam<body_case> {};

TEST_P(DownloadIntegrity, ResponseBodyArrivesByteIdentical) {
    const auto [size, chunked] = GetParam();
    const std::uint64_t seed = 2000 + size;
    recording_upstream upstream([size = size, chunked = chunked, seed](const recorded_request&) {
        response_plan plan;
        plan.kind = response_plan::body_kind::pattern;
        plan.pattern_size = size;
        plan.pattern_seed = seed;
        plan.chunked = chunked;
        return plan;
    });
    sluice_process sluice(config_for(upstream));

    http_connection connection(sluice.port());
    connection.send("GET", "/download");
    const http_response response = connection.read_response(false, 0);

    EXPECT_EQ(response.status, 200u);
    EXPECT_EQ(response.body_size, size);
    EXPECT_EQ(response.body_hash, pattern_hash(seed, size));
}

INSTANTIATE_TEST_SUITE_P(Proxy, DownloadIntegrity, body_cases, body_case_name);

// A response without a length ends when the upstream closes the connection. Here its body and
// the close come together, after the head: the read that takes the body must not leave the
// close unseen (the end of the stream behind a short read, whose edge the reactor has taken
// with the body's), or the response would end only at the upstream's timeout.
TEST(Proxy, ACloseDelimitedResponseEndsWhenTheUpstreamCloses) {
    const std::string body(100, 'x');
    recording_upstream upstream([&body](const recorded_request&) {
        response_plan plan;
        plan.close_delimited = true;
        plan.body_delay = 50ms;
        plan.body = body;
        return plan;
    });
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml()));
    for (int i = 0; i < 3; ++i) {
        const auto start = std::chrono::steady_clock::now();
        http_connection client(sluice.port());
        client.send("GET", "/until-close");
        const http_response response = client.read_response();
        EXPECT_EQ(response.status, 200u);
        EXPECT_EQ(response.body, body);
        // The upstream's timeout is 30 s; the response takes its body_delay and a few ms more.
        EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "request " << i;
    }
}

// A client that closes its side right after a request (its bytes and its end together, as
// `nc -N` does) is answered, and its connection ends then, not at idle-timeout: the read that
// takes the request must not leave the end unseen behind it (drained_read.hpp). First on a new
// connection, then on a kept one, where the wait for the request takes the edge of both. The
// response is a head alone, relayed in one write: a longer one would be relayed with the client
// watched (response_relay.cpp), which takes a close seen meanwhile for the client leaving and
// may cut the response, as nginx does.
TEST(Proxy, AClientThatClosesItsSideAfterARequestIsAnsweredAndLetGo) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.body.clear();
        return plan;
    });
    sluice_process sluice(
        compose_yaml(upstream.url(), roomy_fallback_yaml(), "  idle-timeout: 60s\n"));
    for (const bool kept : {false, true}) {
        SCOPED_TRACE(kept ? "kept connection" : "new connection");
        http_connection client(sluice.port());
        if (kept) {
            client.send("GET", "/first");
            EXPECT_EQ(client.read_response().status, 200u);
        }
        client.send("GET", "/last");
        client.stream().shutdown_send();
        const http_response response = client.read_response();
        EXPECT_EQ(response.status, 200u);
        EXPECT_EQ(response.header("X-Upstream-Target"), "/last");
        EXPECT_TRUE(client.wait_closed(5s)) << "the connection waited for idle-timeout";
    }
}

TEST(Proxy, MethodTargetAndHeadersPassUnchanged) {
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));

    const std::vector<std::string> methods = {"GET", "PUT", "DELETE", "PATCH", "OPTIONS"};
    const std::string target = "/api/v1/items?id=42&q=a%20b&empty=";
    http_connection connection(sluice.port());
    for (const auto& method : methods) {
        connection.send(method,
                        target,
                        {{"X-Custom", "Value  With Spaces"},
                         {"X-Multi", "one"},
                         {"X-Multi", "two"},
                         {"User-Agent", "sluice-itest/1"},
                         {"Accept", "*/*"}},
                        method == "PUT" || method == "PATCH" ? "payload" : "");
        EXPECT_EQ(connection.read_response().status, 200u) << method;
    }

    ASSERT_TRUE(upstream.wait_for_count(methods.size(), 10s));
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), methods.size());
    for (std::size_t i = 0; i < methods.size(); ++i) {
        const auto& r = requests[i];
        EXPECT_EQ(r.method, methods[i]);
        EXPECT_EQ(r.target, target);
        EXPECT_EQ(r.header("X-Custom"), "Value  With Spaces");
        EXPECT_EQ(r.header("User-Agent"), "sluice-itest/1");
        EXPECT_EQ(r.header("Accept"), "*/*");
        // A proxy may keep the two fields or join them (RFC 9110 5.3); the values must survive.
        std::string multi;
        for (const auto& [name, value] : r.headers) {
            if (name == "X-Multi" || name == "x-multi") {
                multi += (multi.empty() ? "" : ", ") + value;
            }
        }
        EXPECT_EQ(multi, "one, two") << methods[i];
        if (methods[i] == "PUT" || methods[i] == "PATCH") {
            EXPECT_EQ(r.body_prefix, "payload");
        }
    }
}

TEST(Proxy, HopByHopRequestHeadersAreStrippedAndForwardingHeadersSet) {
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));

    const http_response response = get(sluice.port(),
                                       "/hop",
                                       {{"Connection", "keep-alive, X-Foo"},
                                        {"X-Foo", "connection-specific"},
                                        {"Keep-Alive", "timeout=5"},
                                        {"TE", "trailers"},
                                        {"Upgrade", "h2c"},
                                        {"X-End-To-End", "kept"}});
    EXPECT_EQ(response.status, 200u);

    ASSERT_TRUE(upstream.wait_for_count(1, 10s));
    const recorded_request r = upstream.requests().at(0);
    EXPECT_EQ(r.header("X-Foo"), std::nullopt) << "named in Connection";
    EXPECT_EQ(r.header("Keep-Alive"), std::nullopt);
    EXPECT_EQ(r.header("TE"), std::nullopt);
    EXPECT_EQ(r.header("Upgrade"), std::nullopt);
    EXPECT_EQ(r.header("Connection").value_or("").find("X-Foo"), std::string::npos);
    EXPECT_EQ(r.header("X-End-To-End"), "kept");
    EXPECT_EQ(r.header("X-Forwarded-For"), "127.0.0.1");
    EXPECT_EQ(r.header("X-Forwarded-Proto"), "http");
}

TEST(Proxy, HopByHopResponseHeadersAreStripped) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.headers = {{"Connection", "X-Bar"},
                        {"X-Bar", "connection-specific"},
                        {"Keep-Alive", "timeout=5"},
                        {"X-Kept", "yes"}};
        return plan;
    });
    sluice_process sluice(config_for(upstream));

    const http_response response = get(sluice.port(), "/hop");
    EXPECT_EQ(response.status, 200u);
    EXPECT_EQ(response.body, "ok");
    EXPECT_EQ(response.header("X-Bar"), std::nullopt);
    EXPECT_NE(response.header("Keep-Alive"), "timeout=5");
    EXPECT_EQ(response.header("X-Kept"), "yes");
}

TEST(Proxy, KeepAliveServesSeveralRequestsOnOneConnection) {
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));

    http_connection connection(sluice.port());
    for (int i = 0; i < 5; ++i) {
        const std::string target = "/keep/" + std::to_string(i);
        connection.send("GET", target);
        const http_response response = connection.read_response();
        EXPECT_EQ(response.status, 200u);
        EXPECT_EQ(response.header("X-Upstream-Target"), target);
        EXPECT_TRUE(response.keep_alive);
    }
    EXPECT_EQ(upstream.requests().size(), 5u);
}

TEST(Proxy, PipelinedRequestsGetResponsesInOrder) {
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));

    std::string batch;
    for (int i = 0; i < 5; ++i) {
        batch += format_request("GET", "/pipe/" + std::to_string(i));
    }
    http_connection connection(sluice.port());
    connection.send_raw(batch);
    for (int i = 0; i < 5; ++i) {
        const http_response response = connection.read_response();
        EXPECT_EQ(response.status, 200u);
        EXPECT_EQ(response.header("X-Upstream-Target"), "/pipe/" + std::to_string(i));
    }
}

// A CRLF a client sends after a body it counted without it, before its next request, is an
// empty line RFC 9112 2.2 asks a server to ignore: both requests are served on the connection.
// sluice answered 400 to it at once, which the client read as the answer to its next request.
TEST(Proxy, AnEmptyLineBeforeARequestLineIsIgnored) {
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));
    http_connection connection(sluice.port());
    connection.send_raw(format_request("POST", "/first", {{"Content-Length", "5"}}, "hello") +
                        "\r\n");
    const auto first = connection.read_response();
    EXPECT_EQ(first.status, 200u);
    connection.send_raw("\r\n" + format_request("GET", "/second"));
    const auto second = connection.read_response();
    EXPECT_EQ(second.status, 200u);
    EXPECT_EQ(second.header("X-Upstream-Target"), "/second");
    EXPECT_EQ(upstream.requests().size(), 2u);
}

// sluice frames a request's body itself: the framing field goes upstream spelled plainly, so that
// an upstream reading `chunked` case-sensitively, or refusing a length with leading zeros, frames
// the body as sluice does. An HTTP/1.0 request's empty Host is none: the upstream's goes in its
// place (an empty one gets 400 from nginx).
TEST(Proxy, FramingFieldsAndAnEmptyHostGoUpstreamPlainly) {
    auto upstream = echo_upstream();
    sluice_process sluice(config_for(upstream));
    http_connection connection(sluice.port());
    connection.send_raw("POST /upper HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n"
                        "5\r\nhello\r\n0\r\n\r\n");
    EXPECT_EQ(connection.read_response().body, "hello");
    connection.send_raw("POST /zeros HTTP/1.1\r\nHost: a\r\nContent-Length: 005\r\n\r\nhello");
    EXPECT_EQ(connection.read_response().body, "hello");
    http_connection old(sluice.port());
    old.send_raw("GET /old HTTP/1.0\r\nHost:\r\n\r\n");
    EXPECT_EQ(old.read_response().status, 200u);

    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 3u);
    EXPECT_EQ(requests[0].header("Transfer-Encoding"), "chunked");
    EXPECT_EQ(requests[1].header("Content-Length"), "5");
    EXPECT_EQ(requests[2].header("Host"), "127.0.0.1:" + std::to_string(upstream.port()));
}

TEST(Proxy, PipelinedRequestsWithBodiesKeepTheirBoundaries) {
    auto upstream = echo_upstream();
    sluice_process sluice(config_for(upstream));

    const std::vector<std::string> bodies = {
        "first", pattern_string(7, 100'000), "", "third\r\n\r\nGET /not-a-request HTTP/1.1\r\n"};
    std::string batch;
    for (std::size_t i = 0; i < bodies.size(); ++i) {
        const std::string target = "/echo/" + std::to_string(i);
        // Alternate Content-Length and chunked framing.
        batch += i % 2 == 0 ? format_request("POST",
                                             target,
                                             {{"Content-Length", std::to_string(bodies[i].size())}},
                                             bodies[i])
                            : format_request("POST",
                                             target,
                                             {{"Transfer-Encoding", "chunked"}},
                                             chunk_encode(bodies[i], 4000));
    }
    http_connection connection(sluice.port());
    connection.send_raw(batch);
    for (std::size_t i = 0; i < bodies.size(); ++i) {
        const http_response response = connection.read_response();
        EXPECT_EQ(response.status, 200u);
        EXPECT_EQ(response.header("X-Upstream-Target"), "/echo/" + std::to_string(i));
        EXPECT_EQ(response.body_size, bodies[i].size());
        EXPECT_EQ(response.body_hash, hash_of(bodies[i]));
    }
    EXPECT_EQ(upstream.requests().size(), bodies.size());
}

// The pool hands out a connection used within the last second without looking at it, and the
// response's read then waits for the socket's next event without trying it first
// (timed_stream::async_read_reply). On a connection the upstream closed meanwhile, that event is
// the reset the request draws: the request goes again on a new connection, at once.
TEST(Proxy, AKeptConnectionTheUpstreamClosedIsRetriedOnANewOne) {
    recording_upstream upstream([](const recorded_request& r) {
        response_plan plan;
        plan.close_silently = r.target == "/first";
        return plan;
    });
    sluice_config config = config_for(upstream);
    config.upstream_timeout = "30s"; // a read left waiting would fail the deadline below
    sluice_process sluice(config);

    ASSERT_EQ(get(sluice.port(), "/first").status, 200u);
    // The upstream has closed its end; sluice's pool still holds the connection.
    ASSERT_TRUE(upstream.wait_quiet(5s));

    const auto start = std::chrono::steady_clock::now();
    const http_response response = get(sluice.port(), "/second");
    EXPECT_EQ(response.status, 200u);
    EXPECT_EQ(response.header("X-Upstream-Target"), "/second");
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    EXPECT_EQ(upstream.stats().connections, 2u);
    EXPECT_EQ(upstream.requests().size(), 2u);
}

/// How many of the requests the upstream saw were `method target`.
std::size_t
seen(const recording_upstream& upstream, std::string_view method, std::string_view target) {
    const auto requests = upstream.requests();
    return static_cast<std::size_t>(
        std::count_if(requests.begin(), requests.end(), [&](const recorded_request& r) {
            return r.method == method && r.target == target;
        }));
}

/// An upstream's answers: the first request to each `/unanswered-...` target is read, and its
/// connection closed without an answer; any other request gets 200.
recording_upstream::handler close_unanswered_on_first_sight() {
    return [targets = std::make_shared<std::set<std::string>>(),
            mutex = std::make_shared<std::mutex>()](const recorded_request& r) {
        response_plan plan;
        const std::lock_guard lock(*mutex);
        plan.close_unanswered =
            r.target.starts_with("/unanswered") && targets->insert(r.target).second;
        return plan;
    };
}

// RFC 9110 9.2.2: only a request whose method is idempotent may be sent again after its
// connection closed unanswered, since the upstream may have acted on it before closing. A POST
// or a PATCH without a body (Content-Length: 0) is no exception: it gets a 502, and the upstream
// sees it once (nginx's default, proxy_next_upstream without non_idempotent).
TEST(Proxy, ANonIdempotentRequestWhoseKeptConnectionClosedUnansweredIsNotSentAgain) {
    recording_upstream upstream(close_unanswered_on_first_sight());
    // One worker: one pool, which every request draws from.
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml(), "  workers: 1\n"));
    for (const std::string method : {"POST", "PATCH"}) {
        const auto target = "/unanswered-" + method;
        // A connection for the pool, kept by sluice and the upstream.
        ASSERT_EQ(get(sluice.port(), "/warm").status, 200u);
        ASSERT_TRUE(upstream.wait_quiet(5s));
        const auto response = request(sluice.port(), method, target, {{"Content-Length", "0"}});
        EXPECT_EQ(response.status, 502u) << method;
        ASSERT_TRUE(upstream.wait_quiet(5s));
        EXPECT_EQ(seen(upstream, method, target), 1u) << method << " was sent again";
    }
}

// The same close, for methods that may be repeated: sent again, at once, on a new connection.
TEST(Proxy, AnIdempotentRequestWhoseKeptConnectionClosedUnansweredIsSentAgain) {
    recording_upstream upstream(close_unanswered_on_first_sight());
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml(), "  workers: 1\n"));
    for (const std::string method : {"GET", "PUT", "DELETE", "OPTIONS"}) {
        const auto target = "/unanswered-" + method;
        ASSERT_EQ(get(sluice.port(), "/warm").status, 200u);
        ASSERT_TRUE(upstream.wait_quiet(5s));
        const auto response = request(sluice.port(), method, target, {{"Content-Length", "0"}});
        EXPECT_EQ(response.status, 200u) << method;
        EXPECT_EQ(response.header("X-Upstream-Target"), target);
        EXPECT_EQ(seen(upstream, method, target), 2u) << method;
    }
}

// An upstream that sends a second response unasked, after the first: the connection must not
// be handed to the next request, or its client (another one here) would get the stray
// response as its own. The pool hands out a connection used within the last second without a
// system call only while the event loop has seen nothing come on it since its response.
TEST(Proxy, BytesAnUpstreamSentUnaskedAreNeverTakenForTheNextResponse) {
    const std::string stray = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nX-Poison: yes\r\n\r\nPOISON";
    recording_upstream upstream([&stray](const recorded_request& r) {
        response_plan plan;
        if (r.target == "/first") {
            plan.stray = stray;
            plan.stray_delay = 50ms;
        }
        return plan;
    });
    // One worker: one pool, which the second client's request must draw from.
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml(), "  workers: 1\n"));

    ASSERT_EQ(get(sluice.port(), "/first").status, 200u);
    ASSERT_TRUE(
        upstream.wait_for_stats([](const upstream_stats& s) { return s.strays_sent == 1; }, 5s));
    // A request answered by the worker itself, sent after the stray bytes: once it is answered,
    // the worker's event loop has taken their event (it runs every handler of one wait for
    // events before the next wait).
    {
        http_connection local(sluice.port());
        local.send_raw("GET /\r\n");
        error_code ec;
        const auto refused = local.try_read_response(ec);
        ASSERT_TRUE(refused) << ec.message();
        ASSERT_EQ(refused->status, 400u);
    }

    const http_response response = get(sluice.port(), "/second");
    EXPECT_EQ(response.status, 200u);
    EXPECT_FALSE(response.header("X-Poison"));
    EXPECT_EQ(response.body, "ok");
    EXPECT_EQ(response.header("X-Upstream-Target"), "/second");
    ASSERT_TRUE(upstream.wait_for_count(2, 5s));
    EXPECT_EQ(upstream.stats().connections, 2u);
}

// With a request in flight (here one the upstream answers late), a keep-alive connection's wait
// for its next request starts with no system call after a read that emptied the socket
// (drained_read.hpp): requests one after another, pipelined ones, and a client that closes after
// its response are served as on an idle worker.
TEST(Proxy, ABusyWorkerServesKeepAliveAndPipelinedRequestsAndHearsACloseAsEver) {
    recording_upstream upstream([](const recorded_request& r) {
        response_plan plan;
        if (r.target == "/slow") {
            plan.delay = 300ms;
        } else if (r.target == "/late") {
            plan.delay = 3s;
        }
        return plan;
    });
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml(), "  workers: 1\n"));
    const auto admin = admin_port(sluice);
    http_connection late(sluice.port());
    late.send("GET", "/late");
    ASSERT_TRUE(upstream.wait_for_stats(
        [](const upstream_stats& st) { return st.headers_received == 1; }, 5s));

    // The next request comes while the response to the first is awaited: it is in the socket
    // when the worker looks early, and is taken from there.
    http_connection early(sluice.port());
    const auto before = upstream.stats().headers_received;
    early.send("GET", "/slow");
    ASSERT_TRUE(upstream.wait_for_stats(
        [before](const upstream_stats& st) { return st.headers_received > before; }, 5s));
    early.send("GET", "/next");
    EXPECT_EQ(early.read_response().header("X-Upstream-Target"), "/slow");
    EXPECT_EQ(early.read_response().header("X-Upstream-Target"), "/next");

    http_connection busy(sluice.port());
    for (int i = 0; i < 20; ++i) {
        const std::string target = "/busy/" + std::to_string(i);
        busy.send("GET", target);
        const http_response response = busy.read_response();
        EXPECT_EQ(response.status, 200u);
        EXPECT_EQ(response.header("X-Upstream-Target"), target);
    }
    std::string batch;
    for (int i = 0; i < 3; ++i) {
        batch += format_request("GET", "/pipe/" + std::to_string(i), {});
    }
    busy.send_raw(batch);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(busy.read_response().header("X-Upstream-Target"), "/pipe/" + std::to_string(i));
    }
    {
        http_connection closing(sluice.port());
        closing.send("GET", "/bye");
        EXPECT_EQ(closing.read_response().status, 200u);
    }
    // Open: `late`, `early` and `busy`; the closed one is closed at once, not at the idle
    // timeout.
    bool met = false;
    wait_for_metrics(
        admin,
        [](const std::string& t) { return metric_or_zero(t, "sluice_connections_open") == 3; },
        5s,
        met);
    EXPECT_TRUE(met) << "a connection the client closed stayed open";
    EXPECT_EQ(late.read_response().header("X-Upstream-Target"), "/late");
}

TEST(Proxy, UpstreamDownGives502) {
    sluice_config config;
    config.upstream_url = "http://127.0.0.1:" + std::to_string(free_port());
    sluice_process sluice(config);

    EXPECT_EQ(get(sluice.port(), "/down").status, 502u);
    // Still serving after the failure.
    EXPECT_EQ(get(sluice.port(), "/down").status, 502u);
}

/// An upstream that answers every request 413 after its header, without reading its body, then
/// closes with the body unread (a reset): as Go's servers, among others, refuse an upload.
recording_upstream early_refusing_upstream() {
    return recording_upstream([](const recorded_request&) {
        response_plan plan;
        plan.status = 413;
        plan.body = "too large for me";
        plan.answer_before_body = true;
        return plan;
    });
}

/// POSTs a body of `size` bytes on `client`, sent on a thread of its own while the answer is
/// awaited, as an uploading client sends on; the answer, or nullopt when none came.
std::optional<http_response> post_while_sending(http_connection& client, std::uint64_t size) {
    client.stream().write_all("POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: " +
                              std::to_string(size) + "\r\n\r\n");
    std::thread sender([&client, size] {
        const std::string block(64 * kib, 'x');
        error_code ec;
        for (std::uint64_t sent = 0; sent < size && !ec; sent += block.size()) {
            client.stream().write_all(block, ec);
        }
    });
    error_code read_ec;
    auto answer = client.try_read_response(read_ec);
    sender.join(); // its writes end with the body, fail once sluice closes, or time out (10 s)
    EXPECT_TRUE(answer.has_value()) << "no answer: " << read_ec.message();
    return answer;
}

// The upstream refuses an upload streamed past server.request-buffer-size: its reset fails
// sluice's next write of the body, but its answer came first and is relayed, with Connection:
// close (the client's body is partly unread), where sluice answered 502 in its place. 64 MiB:
// more than both sockets' buffers take, so the body's relay is still going when it closes.
TEST(Proxy, AnAnswerTheUpstreamSentBeforeReadingTheBodyIsRelayed) {
    auto upstream = early_refusing_upstream();
    sluice_process sluice(config_for(upstream));
    http_connection client(sluice.port(), 10s);
    const auto response = post_while_sending(client, 64 * mib);
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 413u);
    EXPECT_EQ(response->body, "too large for me");
    EXPECT_EQ(response->header("Connection").value_or(""), "close");
    EXPECT_TRUE(client.wait_closed(5s));
    // Still serving, on a new upstream connection.
    EXPECT_EQ(get(sluice.port(), "/after").status, 413u);
}

// The same refusal of a body read whole before the upstream was contacted (request-buffer-size
// 32 MiB): it fails the first write, of the header with the body, which more than both sockets'
// buffers take. The answer is relayed, and the client's connection, whose request was read
// whole, is kept for its next request.
TEST(Proxy, AnAnswerBeforeABodyReadAheadWasTakenIsRelayed) {
    auto upstream = early_refusing_upstream();
    auto config = config_for(upstream);
    config.request_buffer_size = 32 * mib;
    sluice_process sluice(config);
    http_connection client(sluice.port(), 10s);
    const auto response = post_while_sending(client, 32 * mib);
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 413u);
    EXPECT_EQ(response->body, "too large for me");
    EXPECT_FALSE(response->header("Connection").has_value());
    client.send("GET", "/next");
    EXPECT_EQ(client.read_response().status, 413u) << "the connection was not kept";
}

TEST(Proxy, SlowUpstreamGives504AfterTheTimeout) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.delay = 3s;
        return plan;
    });
    sluice_config config = config_for(upstream);
    config.upstream_timeout = "500ms";
    sluice_process sluice(config);

    const auto start = std::chrono::steady_clock::now();
    const http_response response = get(sluice.port(), "/slow");
    const auto elapsed = std::chrono::steady_clock::now() - start;

    EXPECT_EQ(response.status, 504u);
    EXPECT_GE(elapsed, 450ms);
    EXPECT_LT(elapsed, 2500ms) << "the 3 s upstream delay must not be waited out";
}

/// An upstream that answers the first request of its one connection, then reads nothing more
/// (its socket buffers fill) until it is destroyed.
class upstream_that_stops_reading {
public:
    ~upstream_that_stops_reading() { over_.set_value(); } // server_'s thread then ends

    std::string url() const { return server_.url(); }

    /// Connections made to it after the first, never accepted.
    unsigned pending_connections() const { return server_.pending_connections(); }

private:
    std::promise<void> over_;
    /// After over_, whose future it holds.
    one_connection_server server_{[over = over_.get_future().share()](int fd) {
        fd_stream stream(fd);
        stream.timeout(10s);
        std::string head;
        char byte = 0;
        error_code ec;
        while (head.find("\r\n\r\n") == std::string::npos &&
               stream.read_some(boost::asio::buffer(&byte, 1), ec) == 1) {
            head += byte;
        }
        stream.write_all("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", ec);
        over.wait_for(10s);
    }};
};

/// A config forwarding to `upstream` with upstream.timeout 1 s and request bodies up to
/// `read_whole` read whole before they go (0: streamed from their first block).
sluice_config stopping_upstream_config(const upstream_that_stops_reading& upstream,
                                       std::uint64_t read_whole) {
    sluice_config config;
    config.upstream_url = upstream.url();
    config.upstream_timeout = "1s";
    config.request_buffer_size = read_whole;
    return config;
}

// An upstream that stops taking a request (its socket buffers full) is given upstream.timeout
// for it once: the 504 of that timeout, on the connection the request began on. A timeout is
// no sign of a stale pooled connection (a stale one fails at once, with a reset), and taking it
// for one sent the request again on a new connection, which doubled the wait before a 502.
TEST(Proxy, AnUpstreamThatStopsReadingARequestGets504AfterOneTimeout) {
    upstream_that_stops_reading upstream;
    // Read whole first, then written upstream with the header in one write: far more than the
    // loopback socket buffers of a connection whose reader stopped can take.
    constexpr std::uint64_t body_size = 32 * mib;
    auto config = stopping_upstream_config(upstream, body_size);
    config.max_body_size = body_size;
    sluice_process sluice(config);

    http_connection client(sluice.port(), 10s);
    client.send("GET", "/first");
    ASSERT_EQ(client.read_response().status, 200u) << "the connection to be reused";
    client.send_raw(
        format_request("POST", "/upload", {{"Content-Length", std::to_string(body_size)}}));
    client.send_pattern_body(7, body_size, false);
    // From here sluice has the body whole and writes it to the pooled connection.
    const auto sent = std::chrono::steady_clock::now();
    const http_response response = client.read_response();
    const auto waited = std::chrono::steady_clock::now() - sent;

    EXPECT_EQ(response.status, 504u) << response.body;
    EXPECT_GE(waited, 900ms) << "the write's timeout, less the time of the body's last read";
    EXPECT_EQ(upstream.pending_connections(), 0u) << "no second connection for a retry";
}

// The same upstream part-way through a body that streams (request-buffer-size 0): the write
// that it takes nothing of for upstream.timeout ends the request with a 504 too (it was a 502),
// and the client, whose body is partly unread, gets Connection: close.
TEST(Proxy, AnUpstreamThatStopsReadingABodyPartWayGets504) {
    upstream_that_stops_reading upstream;
    sluice_process sluice(stopping_upstream_config(upstream, 0));

    http_connection client(sluice.port(), 10s);
    client.send("GET", "/first");
    ASSERT_EQ(client.read_response().status, 200u) << "the connection to be reused";
    constexpr std::uint64_t body_size = 64 * mib;
    client.send_raw(
        format_request("POST", "/upload", {{"Content-Length", std::to_string(body_size)}}));
    // Sent from a thread of its own: it blocks once sluice stops reading, and ends with an error
    // once sluice has answered and closed.
    std::thread sender([&client] {
        try {
            client.send_pattern_body(7, body_size, false);
        } catch (const std::exception&) {
        }
    });
    error_code ec;
    const auto response = client.try_read_response(ec);
    sender.join();
    ASSERT_TRUE(response) << ec.message();
    EXPECT_EQ(response->status, 504u) << response->body;
    EXPECT_EQ(response->header("Connection"), "close") << "the body is partly unread";
}

} // namespace
} // namespace sluice::test
