// SPDX-License-Identifier: Apache-2.0
// Hostile input from clients and upstreams (issue 11): bytes that are not HTTP/1.x, credentials
// meant for a proxy, unbounded chunk extensions and trailers, field values Beast cannot hold,
// 1xx responses Beast has no name for, and absolute-form targets. Each is answered at once, in
// bounded memory, and leaves the connection gauge and the access log true.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/limit_probe.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

/// Text access log on stdout, so the tests can look for a request's line.
constexpr const char* access_logging = "  level: info\n  access-log: true\n";

std::string yaml_for(const recording_upstream& upstream, const std::string& server_extra = "") {
    return compose_yaml(upstream.url(), roomy_fallback_yaml(), server_extra, access_logging);
}

/// The resident set of process `pid` in KiB (VmRSS in /proc/<pid>/status); 0 if unreadable.
std::uint64_t rss_kib(pid_t pid) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) {
            return std::stoull(line.substr(6));
        }
    }
    return 0;
}

/// Waits until the admin port reports no open client connection; the last scrape.
std::string wait_connections_closed(std::uint16_t admin, bool& met) {
    return wait_for_metrics(
        admin,
        [](const std::string& t) { return metric_or_zero(t, "sluice_connections_open") == 0; },
        10s,
        met);
}

// --- 7: not HTTP/1.x ------------------------------------------------------------------------

// The header timeout is 10 s by default; an answer within 3 s can only be an immediate one.
constexpr auto well_before_header_timeout = 3s;

void expect_immediate_400(const std::string& bytes) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port(), well_before_header_timeout);
    connection.send_raw(bytes);
    error_code ec;
    const auto response = connection.try_read_response(ec);
    ASSERT_TRUE(response) << "no answer within 3 s: " << ec.message();
    EXPECT_EQ(response->status, 400u);
    EXPECT_TRUE(connection.wait_closed(well_before_header_timeout));
    ASSERT_TRUE(upstream.wait_quiet(5s));
    EXPECT_EQ(upstream.stats().headers_received, 0u);
}

TEST(HostileInput, Http09RequestGets400AtOnce) {
    expect_immediate_400("GET /\r\n");
}

TEST(HostileInput, TlsClientHelloGets400AtOnce) {
    // The start of a TLS 1.2 ClientHello record: handshake (0x16), version 3.1, length, type 1.
    const std::string hello("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\x5b\x2c", 13);
    expect_immediate_400(hello);
}

// A method not in capitals is refused, as nginx refuses it: a rule's `methods` list `POST`, and
// `post` matched none of them (its limit escaped) while an upstream that upper-cases methods
// served it as POST. Whole in one read (Beast's parser takes any token), and in pieces.
TEST(HostileInput, AMethodNotInCapitalsGets400) {
    expect_immediate_400("post /x HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n");
    expect_immediate_400("Get /x HTTP/1.1\r\nHost: te");
}

// --- connections: a cap, and a new connection's header-timeout ---------------------------------

/// Scrapes until sluice reports `open` client connections; true when it did within 10 s.
bool wait_open_connections(std::uint16_t admin, double open) {
    bool met = false;
    (void)wait_for_metrics(
        admin,
        [open](const std::string& t) {
            return metric_or_zero(t, "sluice_connections_open") == open;
        },
        10s,
        met);
    return met;
}

// At server.max-connections a new connection closes the oldest connection that is idle without
// having sent a request, and is served: silent connections can neither keep clients out nor take
// the descriptors the upstream's connections, Redis and the probes need. One worker: the oldest
// is the first opened.
TEST(HostileInput, AtMaxConnectionsANewConnectionClosesTheOldestSilentOne) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream, "  workers: 1\n  max-connections: 3\n"));
    const auto admin = admin_port(sluice);
    std::vector<std::unique_ptr<http_connection>> silent;
    for (int i = 0; i < 3; ++i) {
        silent.push_back(std::make_unique<http_connection>(sluice.port(), 5s));
    }
    ASSERT_TRUE(wait_open_connections(admin, 3)) << sluice.log_text();

    http_connection newcomer(sluice.port(), 5s);
    newcomer.send("GET", "/served");
    EXPECT_EQ(newcomer.read_response().status, 200u);
    EXPECT_TRUE(silent[0]->wait_closed(5s)) << "the oldest silent connection was kept";
    const auto text = scrape_metrics(admin);
    EXPECT_EQ(metric_or_zero(text, "sluice_connections_over_cap_total"), 1.0) << text;
    EXPECT_TRUE(sluice.wait_for_log("server.max-connections (3) reached: closing the longest idle "
                                    "connection for a new one",
                                    5s))
        << sluice.log_text();
}

// With every connection at the cap busy (each waiting for its response), a new one is closed
// at once, unanswered: closing one with a request in flight would lose that request. The busy
// ones are answered.
TEST(HostileInput, AtMaxConnectionsWithNoneIdleTheNewConnectionIsClosed) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.delay = 2s;
        return plan;
    });
    sluice_process sluice(yaml_for(upstream, "  workers: 1\n  max-connections: 2\n"));
    const auto admin = admin_port(sluice);
    std::vector<std::unique_ptr<http_connection>> busy;
    for (int i = 0; i < 2; ++i) {
        busy.push_back(std::make_unique<http_connection>(sluice.port(), 10s));
        busy.back()->send("GET", "/busy" + std::to_string(i));
    }
    ASSERT_TRUE(upstream.wait_for_stats(
        [](const upstream_stats& s) { return s.headers_received >= 2; }, 5s));

    http_connection newcomer(sluice.port(), 5s);
    newcomer.send("GET", "/refused");
    error_code ec;
    EXPECT_FALSE(newcomer.try_read_response(ec).has_value()) << "the new connection was served";
    for (auto& b : busy) {
        EXPECT_EQ(b->read_response().status, 200u);
    }
    EXPECT_EQ(metric_or_zero(scrape_metrics(admin), "sluice_connections_over_cap_total"), 1.0);
    ASSERT_TRUE(upstream.wait_quiet(3s));
    EXPECT_EQ(upstream.requests().size(), 2u);
}

// A new connection that sends nothing is closed after server.header-timeout, not after the
// idle-timeout of a kept-alive one: a client that connects and says nothing holds a descriptor
// no longer than a slow header would. (Timers never fire early: not before 1 s.)
TEST(HostileInput, ASilentNewConnectionIsClosedAfterTheHeaderTimeout) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream, "  header-timeout: 1s\n  idle-timeout: 60s\n"));
    const auto opened = std::chrono::steady_clock::now();
    http_connection silent(sluice.port(), 10s);
    ASSERT_TRUE(silent.wait_closed(10s));
    const auto closed_after = std::chrono::steady_clock::now() - opened;
    EXPECT_GE(closed_after, 1s);
    EXPECT_LT(closed_after, 5s);
    // A kept-alive connection waits its idle-timeout, as before.
    http_connection kept(sluice.port(), 10s);
    kept.send("GET", "/kept");
    EXPECT_EQ(kept.read_response().status, 200u);
    EXPECT_FALSE(kept.wait_closed(1500ms)) << "a kept-alive connection waited header-timeout";
    // So does one whose client ended its last body with a CRLF it did not count (an empty line
    // before its next request line): it waited under header-timeout, and was closed at 1 s.
    http_connection crlf(sluice.port(), 10s);
    crlf.send_raw(format_request("POST", "/crlf", {{"Content-Length", "5"}}, "hello") + "\r\n");
    EXPECT_EQ(crlf.read_response().status, 200u);
    EXPECT_FALSE(crlf.wait_closed(1500ms)) << "the CRLF made it wait header-timeout";
}

// --- 8: credentials for a proxy ------------------------------------------------------------

TEST(HostileInput, ProxyAuthorizationNeverReachesUpstream) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    const auto response = get(sluice.port(),
                              "/private",
                              {{"Proxy-Authorization", "Basic c2VjcmV0OnNlY3JldA=="},
                               {"Proxy-Connection", "keep-alive"}});
    EXPECT_EQ(response.status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(1, 10s));
    const auto seen = upstream.requests().at(0);
    EXPECT_FALSE(seen.header("Proxy-Authorization")) << *seen.header("Proxy-Authorization");
    EXPECT_FALSE(seen.header("Proxy-Connection"));
}

// --- 10: unbounded chunk extensions and trailers --------------------------------------------

/// What a connection that floods sluice came to.
struct flood_result {
    std::optional<http_response> response;
    error_code ec;
    std::uint64_t sent = 0;
    std::uint64_t rss_growth_kib = 0;
    unsigned other_status = 0;
};

/**
 * Sends `head`, then `unit` over and over until `limit` bytes went out or sluice stops taking
 * them, reading sluice's answer meanwhile; another client asks for /other while it runs.
 */
flood_result flood(const sluice_process& sluice,
                   const std::string& head,
                   const std::string& unit,
                   std::uint64_t limit) {
    flood_result result;
    const auto before = rss_kib(sluice.pid());
    http_connection connection(sluice.port(), 10s);
    connection.send_raw(head);
    std::atomic<std::uint64_t> sent{0};
    std::atomic<bool> writing{true};
    std::thread writer([&] {
        std::string piece;
        while (piece.size() < 64 * 1024) {
            piece += unit;
        }
        error_code ec;
        while (sent.load() < limit) {
            connection.stream().write_all(piece, ec);
            if (ec) {
                break;
            }
            sent += piece.size();
        }
        writing = false;
    });
    // Once the flood is under way, another client must still be served.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (writing && sent.load() < 1024 * 1024 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    result.other_status = get(sluice.port(), "/other").status;
    result.response = connection.try_read_response(result.ec);
    writer.join();
    result.sent = sent.load();
    const auto after = rss_kib(sluice.pid());
    result.rss_growth_kib = after > before ? after - before : 0;
    return result;
}

// 64 MiB offered; sluice may keep a few of its own buffers, never the flood.
constexpr std::uint64_t flood_bytes = 64ull * 1024 * 1024;
constexpr std::uint64_t rss_bound_kib = 16 * 1024;

TEST(HostileInput, EndlessChunkExtensionGets400InBoundedMemory) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    const auto result =
        flood(sluice,
              format_request("POST", "/upload", {{"Transfer-Encoding", "chunked"}}) + "5;a=",
              "a",
              flood_bytes);
    ASSERT_TRUE(result.response) << "no answer after " << result.sent
                                 << " bytes: " << result.ec.message();
    EXPECT_EQ(result.response->status, 400u);
    EXPECT_LT(result.rss_growth_kib, rss_bound_kib) << "after " << result.sent << " bytes";
    EXPECT_EQ(result.other_status, 200u);
    ASSERT_TRUE(upstream.wait_quiet(5s));
    EXPECT_EQ(upstream.stats().headers_received, 1u) << "only /other reaches the upstream";
}

TEST(HostileInput, EndlessTrailerGets400InBoundedMemory) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    // Millions of trailer fields "a:" with empty values, 4 bytes a line, and no blank line.
    const auto result =
        flood(sluice,
              format_request("POST", "/upload", {{"Transfer-Encoding", "chunked"}}) +
                  "5\r\nhello\r\n0\r\n",
              "a:\r\n",
              flood_bytes);
    ASSERT_TRUE(result.response) << "no answer after " << result.sent
                                 << " bytes: " << result.ec.message();
    EXPECT_EQ(result.response->status, 400u);
    EXPECT_LT(result.rss_growth_kib, rss_bound_kib) << "after " << result.sent << " bytes";
    EXPECT_EQ(result.other_status, 200u);
}

TEST(HostileInput, ManyTinyTrailerFieldsGet400) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    std::string trailer;
    for (int i = 0; i < 100'000; ++i) {
        trailer += "a:\r\n";
    }
    http_connection connection(sluice.port(), 10s);
    connection.send_raw(format_request("POST", "/upload", {{"Transfer-Encoding", "chunked"}}) +
                        "5\r\nhello\r\n0\r\n" + trailer + "\r\n");
    EXPECT_EQ(connection.read_response().status, 400u);
}

TEST(HostileInput, SmallTrailerPasses) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port(), 10s);
    connection.send_raw(format_request("POST", "/upload", {{"Transfer-Encoding", "chunked"}}) +
                        "5;ext=1\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n");
    EXPECT_EQ(connection.read_response().status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(1, 10s));
    EXPECT_EQ(upstream.requests().at(0).body_size, 5u);
}

// A trailer is read, not forwarded. Beast adds its fields to the request's own: a body whose end
// is parsed before the header goes upstream (an empty one, or one that came whole with it) must
// not carry them there as header fields, past the checks made on the header (one Host, the
// hop-by-hop and forwarding fields).
TEST(HostileInput, TrailerFieldsNeverReachTheUpstreamAsHeaderFields) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    const std::string trailer = "Host: evil.example\r\nX-Forwarded-For: 6.6.6.6\r\n"
                                "Proxy-Authorization: Basic c2VjcmV0\r\nX-Smuggled: yes\r\n\r\n";
    http_connection connection(sluice.port(), 10s);
    const std::string head = format_request("POST", "/upload", {{"Transfer-Encoding", "chunked"}});
    connection.send_raw(head + "0\r\n" + trailer);
    EXPECT_EQ(connection.read_response().status, 200u);
    connection.send_raw(head + "5\r\nhello\r\n0\r\n" + trailer);
    EXPECT_EQ(connection.read_response().status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(2, 10s));
    for (const auto& request : upstream.requests()) {
        std::vector<std::string> hosts;
        std::vector<std::string> forwarded_for;
        for (const auto& [name, value] : request.headers) {
            EXPECT_NE(name, "X-Smuggled");
            EXPECT_NE(name, "Proxy-Authorization");
            if (name == "Host") {
                hosts.push_back(value);
            } else if (name == "X-Forwarded-For") {
                forwarded_for.push_back(value);
            }
        }
        EXPECT_EQ(hosts.size(), 1u) << request.body_size;
        EXPECT_EQ(forwarded_for, std::vector<std::string>{"127.0.0.1"});
    }
}

// Connection lines naming 60,000 tokens over a header of as many other fields as a request may
// have (256 in all): each field is looked up among the sorted tokens. (Before the cap on fields,
// 40,000 fields compared with every token, as a build before did, were 2.4e9 comparisons, over
// 10 s under the sanitizers; the cap bounds that product too, and the lookup keeps it small.)
TEST(HostileInput, ManyConnectionTokensOverManyFieldsCostLinearTime) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream, "  max-header-size: 1MiB\n"));
    // Ten lines of 6,000 tokens: a field value over 64 KiB would be a 431 of its own.
    header_list fields{{"Connection", "x-named"}, {"X-Named", "hop"}};
    for (int line = 0; line < 10; ++line) {
        std::string tokens = "x";
        for (int i = 0; i < 6'000; ++i) {
            tokens += ",x" + std::to_string(line * 6'000 + i);
        }
        fields.emplace_back("Connection", tokens);
    }
    const int others = 256 - 13; // Host and the fields above: 256 in all
    for (int i = 0; i < others; ++i) {
        fields.emplace_back("y" + std::to_string(i), "v");
    }
    http_connection connection(sluice.port(), 5s);
    connection.send_raw(format_request("GET", "/many", fields));
    error_code ec;
    const auto response = connection.try_read_response(ec);
    ASSERT_TRUE(response) << "no answer within 5 s: " << ec.message();
    EXPECT_EQ(response->status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(1, 5s));
    const auto request = upstream.requests().front();
    EXPECT_FALSE(request.header("X-Named")) << "a field the Connection line names is hop-by-hop";
    EXPECT_FALSE(request.header("Connection"));
    EXPECT_EQ(request.header("y0"), "v");
    EXPECT_EQ(request.header("y" + std::to_string(others - 1)), "v");
}

// --- 12: field values over 64 KiB -------------------------------------------------------------

// Beast keeps a field value's length in 16 bits and throws beyond it.
const std::string huge_value(70'000, 'v');

/// Sends `request` on a connection of its own, expects `status` in answer, then that sluice closes
/// the connection (the connection gauge back to zero).
void expect_answer_then_closed(const sluice_process& sluice,
                               const std::string& request,
                               unsigned status) {
    const auto admin = admin_port(sluice);
    {
        http_connection connection(sluice.port(), 10s);
        connection.send_raw(request);
        error_code ec;
        const auto response = connection.try_read_response(ec);
        ASSERT_TRUE(response) << ec.message();
        EXPECT_EQ(response->status, status);
    }
    bool met = false;
    const auto text = wait_connections_closed(admin, met);
    EXPECT_TRUE(met) << text;
}

TEST(HostileInput, HeaderValueOver64KiBGets431) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream, "  max-header-size: 256KiB\n"));
    expect_answer_then_closed(sluice, format_request("GET", "/big", {{"X-Big", huge_value}}), 431);
    EXPECT_TRUE(sluice.wait_for_log("path=/big key=- decision=- status=431", 5s))
        << sluice.log_text();
    EXPECT_EQ(get(sluice.port(), "/after").status, 200u);
}

// An absolute-form target's authority becomes the Host field: one over 64 KiB (with the URI
// limit raised past it) is a bad target, not an exception.
TEST(HostileInput, AbsoluteFormAuthorityOver64KiBGets400) {
    recording_upstream upstream;
    sluice_process sluice(
        yaml_for(upstream, "  max-header-size: 512KiB\n  max-uri-length: 256KiB\n"));
    expect_answer_then_closed(
        sluice, "GET http://" + huge_value + "/long HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    EXPECT_EQ(get(sluice.port(), "/after").status, 200u);
    ASSERT_TRUE(upstream.wait_quiet(5s));
    EXPECT_EQ(upstream.requests().size(), 1u);
}

TEST(HostileInput, TrailerValueOver64KiBGets400) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream, "  max-header-size: 256KiB\n"));
    expect_answer_then_closed(
        sluice,
        format_request("POST", "/trailer", {{"Transfer-Encoding", "chunked"}}) +
            "5\r\nhello\r\n0\r\nX-Big: " + huge_value + "\r\n\r\n",
        400);
    EXPECT_TRUE(sluice.wait_for_log("path=/trailer", 5s)) << sluice.log_text();
}

TEST(HostileInput, UpstreamTrailerValueOver64KiBEndsTheResponse) {
    recording_upstream upstream([](const recorded_request& request) {
        response_plan plan;
        plan.chunked = true;
        if (request.target == "/upstream-trailer") {
            plan.trailer = "X-Big: " + huge_value + "\r\n";
        }
        return plan;
    });
    sluice_process sluice(yaml_for(upstream));
    const auto admin = admin_port(sluice);
    {
        http_connection connection(sluice.port(), 10s);
        connection.send("GET", "/upstream-trailer");
        // The response had started: sluice can only end it by closing, never complete it.
        bool complete = false;
        try {
            error_code ec;
            complete = connection.try_read_response(ec).has_value();
        } catch (const std::exception&) {
            complete = false; // the client reports the truncated body by throwing
        }
        EXPECT_FALSE(complete) << "a response that cannot be relayed came out complete";
        EXPECT_TRUE(connection.wait_closed(5s));
    }
    bool met = false;
    const auto text = wait_connections_closed(admin, met);
    EXPECT_TRUE(met) << text;
    EXPECT_TRUE(sluice.wait_for_log("path=/upstream-trailer", 5s)) << sluice.log_text();
    EXPECT_EQ(get(sluice.port(), "/after").status, 200u);
}

// --- 13: 1xx responses Beast has no name for ---------------------------------------------------

// A 1xx has no body, so it goes on without the Content-Length an upstream gave it (RFC 9110 8.6).
TEST(HostileInput, EarlyHintsRelayedByNumberAndReason) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.interim = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n"
                       "Content-Length: 0\r\n\r\n";
        return plan;
    });
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port(), 10s);
    connection.send("GET", "/hints");
    const auto hints = connection.read_response();
    EXPECT_EQ(hints.status, 103u);
    EXPECT_EQ(hints.reason, "Early Hints");
    EXPECT_EQ(hints.header("Link"), "</style.css>; rel=preload");
    EXPECT_EQ(hints.header("Content-Length"), std::nullopt);
    const auto final_response = connection.read_response();
    EXPECT_EQ(final_response.status, 200u);
    EXPECT_EQ(final_response.body, "ok");
}

/// Reads from `stream` until what came ends with `end` or holds more than `most` bytes; what
/// came. The stream's own timeout bounds each read (a read that fails ends it too).
std::string read_raw_until(fd_stream& stream, std::string_view end, std::size_t most) {
    std::string got;
    char block[16 * 1024];
    while (got.size() <= most && !std::string_view(got).ends_with(end)) {
        error_code ec;
        const auto n = stream.read_some(boost::asio::buffer(block), ec);
        if (ec) {
            break;
        }
        got.append(block, n);
    }
    return got;
}

// A 103 whose Link field is longer than Beast's fields hold a value (65,535 bytes), within an
// upstream.max-header-size raised for it, is passed on whole, as a final response's would be;
// copied into Beast's fields, its std::length_error escaped the request's coroutine. The
// connection then serves its next request.
TEST(HostileInput, EarlyHintsWithAFieldBeyondBeastsFieldsAreRelayedWhole) {
    const std::string link = "</" + std::string(70'000, 'l') + ">; rel=preload";
    recording_upstream upstream([&link](const recorded_request& request) {
        response_plan plan;
        if (request.target == "/hints") {
            plan.interim = "HTTP/1.1 103 Early Hints\r\nLink: " + link + "\r\n\r\n";
        }
        return plan;
    });
    auto yaml = yaml_for(upstream);
    const std::string section = "upstream:\n";
    yaml.insert(yaml.find(section) + section.size(), "  max-header-size: 256KiB\n");
    sluice_process sluice(yaml);
    http_connection connection(sluice.port(), 10s);
    connection.send("GET", "/hints");
    const std::string hints = "HTTP/1.1 103 Early Hints\r\nLink: " + link + "\r\n\r\n";
    // Raw: the test client's Beast parser cannot hold such a field either.
    const auto got = read_raw_until(connection.stream(), "\r\n\r\nok", hints.size() + 4096);
    ASSERT_TRUE(got.starts_with(hints)) << got.size() << " bytes: " << got.substr(0, 200);
    const std::string_view final_response = std::string_view(got).substr(hints.size());
    EXPECT_TRUE(final_response.starts_with("HTTP/1.1 200 OK\r\n")) << final_response;
    EXPECT_TRUE(final_response.ends_with("\r\n\r\nok")) << final_response;
    connection.send("GET", "/after");
    EXPECT_EQ(connection.read_response().status, 200u);
    EXPECT_TRUE(sluice.wait_for_log("path=/hints", 5s)) << sluice.log_text();
}

// --- Upstream heads sluice cannot pass on faithfully ---------------------------------------------

struct upstream_head_case {
    const char* name;
    /// What the upstream sends for /bad, before the response it would send anyway (which it
    /// then closes after).
    std::string bytes;
};

void PrintTo(const upstream_head_case& c, std::ostream* os) {
    *os << c.name;
}

std::string upstream_head_name(const testing::TestParamInfo<upstream_head_case>& info) {
    return info.param.name;
}

class UpstreamHead : public testing::TestWithParam<upstream_head_case> {};

/// The largest upstream response head sluice takes (response_relay.cpp).
constexpr std::size_t upstream_head_limit = 64 * 1024;

/// An upstream response whose head (status line, fields, blank line) is `size` bytes, with a
/// body of 5: two padding fields, each within Beast's 65,535 bytes per value.
std::string upstream_head_of(std::size_t size) {
    const std::string first = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Pad-1: ";
    const std::string middle = "\r\nX-Pad-2: ";
    const std::string last = "\r\n\r\n";
    const auto pad = size - first.size() - middle.size() - last.size();
    return first + std::string(pad / 2, 'a') + middle + std::string(pad - pad / 2, 'b') + last +
           "hello";
}

// A status no client reads as a final response, nor as an interim one, or a body a client would
// frame otherwise than sluice (Transfer-Encoding overrides Content-Length, and a final coding
// other than chunked is read to the close: RFC 9112 6.1, 6.3): one 502, and the connection
// stays in step, its next request answered by its own response over a new upstream connection.
TEST_P(UpstreamHead, Gets502AndTheConnectionStaysInStep) {
    const std::string bytes = GetParam().bytes;
    recording_upstream upstream([bytes](const recorded_request& request) {
        response_plan plan;
        if (request.target == "/bad") {
            plan.interim = bytes;
            plan.close = true;
        }
        return plan;
    });
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port(), 5s);
    connection.send("GET", "/bad");
    error_code ec;
    const auto response = connection.try_read_response(ec);
    ASSERT_TRUE(response) << "no response: " << ec.message();
    EXPECT_EQ(response->status, 502u);
    connection.send("GET", "/after");
    const auto after = connection.try_read_response(ec);
    ASSERT_TRUE(after) << "no response: " << ec.message();
    EXPECT_EQ(after->status, 200u);
    EXPECT_EQ(after->header("X-Upstream-Target"), "/after");
    EXPECT_EQ(upstream.stats().connections, 2u) << "the connection of /bad was used again";
}

INSTANTIATE_TEST_SUITE_P(
    HostileInput,
    UpstreamHead,
    testing::Values(
        upstream_head_case{"Status099", "HTTP/1.1 099 Weird\r\nX-A: 1\r\n\r\n"},
        upstream_head_case{"Status000WithBody",
                           "HTTP/1.1 000 Zero\r\nContent-Length: 5\r\n\r\nhello"},
        upstream_head_case{"Status600", "HTTP/1.1 600 Beyond\r\nContent-Length: 5\r\n\r\nhello"},
        upstream_head_case{"GzipCodingWithLength",
                           "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n"
                           "hello"},
        upstream_head_case{"GzipCodingToTheClose",
                           "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello"},
        upstream_head_case{"GzipThenChunked",
                           "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                           "5\r\nhello\r\n0\r\n\r\n"},
        upstream_head_case{"DifferentLengthsInAList",
                           "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!"},
        // One byte over the limit, which Beast alone let in once the status line had come in
        // the first read.
        upstream_head_case{"HeadOverTheLimit", upstream_head_of(upstream_head_limit + 1)},
        upstream_head_case{"DifferentLengthsOnTwoLines",
                           "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
                           "hello!"}),
    upstream_head_name);

// A head of exactly the limit is passed on, its fields with it.
TEST(HostileInput, AnUpstreamHeadOfTheLimitIsRelayed) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.interim = upstream_head_of(upstream_head_limit);
        plan.close = true;
        return plan;
    });
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port(), 5s);
    connection.send("GET", "/large");
    error_code ec;
    const auto response = connection.try_read_response(ec);
    ASSERT_TRUE(response) << "no response: " << ec.message();
    EXPECT_EQ(response->status, 200u);
    EXPECT_EQ(response->body, "hello");
    // The padding fields whole: the 65,536 bytes but the other 60 of the head, in two.
    const auto pad_1 = response->header("X-Pad-1").value_or("");
    const auto pad_2 = response->header("X-Pad-2").value_or("");
    EXPECT_EQ(pad_1.size(), 32738u);
    EXPECT_EQ(pad_1.find_first_not_of('a'), std::string::npos);
    EXPECT_EQ(pad_2.size(), 32738u);
    EXPECT_EQ(pad_2.find_first_not_of('b'), std::string::npos);
}

// upstream.max-header-size is the operator's to set: under 1 KiB a head of 1,024 bytes is
// relayed and one of 1,025 gets 502; under 128 KiB a head past the default's 64 KiB is relayed.
TEST(HostileInput, TheUpstreamHeadLimitIsTheOperators) {
    struct limit_case {
        std::string setting;
        std::size_t head;
        unsigned status;
    };

    const limit_case cases[] = {
        {"1KiB", 1024, 200}, {"1KiB", 1025, 502}, {"128KiB", 100 * 1024, 200}};
    for (const auto& c : cases) {
        SCOPED_TRACE(c.setting + ", a head of " + std::to_string(c.head));
        recording_upstream upstream([&c](const recorded_request&) {
            response_plan plan;
            plan.interim = upstream_head_of(c.head);
            plan.close = true;
            return plan;
        });
        auto yaml = yaml_for(upstream);
        const std::string section = "upstream:\n";
        yaml.insert(yaml.find(section) + section.size(), "  max-header-size: " + c.setting + "\n");
        sluice_process sluice(yaml);
        http_connection connection(sluice.port(), 5s);
        connection.send("GET", "/large");
        error_code ec;
        const auto response = connection.try_read_response(ec);
        ASSERT_TRUE(response) << "no response: " << ec.message();
        EXPECT_EQ(response->status, c.status);
        if (c.status == 200) {
            EXPECT_EQ(response->body, "hello");
        }
    }
}

// RFC 9110 8.6: a Content-Length of identical values, in a list or on several lines, may be
// taken as the one value, and a proxy must then send that value alone (RFC 9112 6.3): a client
// (or a cache behind it) that refuses the list, or reads the two lines otherwise, must get one
// valid field. The body is relayed whole, and the connection stays in step.
TEST(HostileInput, RepeatedIdenticalUpstreamContentLengthsReachTheClientAsOne) {
    const std::vector<header_list> lengths = {
        {{"Content-Length", "5, 5"}},
        {{"Content-Length", "5"}, {"Content-Length", "5"}},
        {{"Content-Length", "5,5 , 5"}, {"Content-Length", "5"}},
    };
    for (const auto& fields : lengths) {
        recording_upstream upstream([&fields](const recorded_request&) {
            response_plan plan;
            plan.headers = fields;
            plan.body = "hello";
            plan.close_delimited = true; // no Content-Length of the upstream helper's own
            return plan;
        });
        sluice_process sluice(yaml_for(upstream));
        http_connection connection(sluice.port(), 5s);
        connection.send("GET", "/twice");
        error_code ec;
        const auto response = connection.try_read_response(ec);
        const auto what = fields.front().second + " on " + std::to_string(fields.size()) + " lines";
        ASSERT_TRUE(response) << what << ": no response: " << ec.message();
        EXPECT_EQ(response->status, 200u) << what;
        EXPECT_EQ(response->body, "hello") << what;
        EXPECT_EQ(count_header(response->headers, "Content-Length"), 1u) << what;
        EXPECT_EQ(response->header("Content-Length"), "5") << what;
        connection.send("GET", "/after");
        const auto after = connection.try_read_response(ec);
        ASSERT_TRUE(after) << what << ": no response: " << ec.message();
        EXPECT_EQ(after->header("X-Upstream-Target"), "/after") << what;
    }
}

// --- Interim responses: one deadline, a bounded number -------------------------------------------

// An upstream that sends 100 Continue every half timeout, and never a final response, gets its
// request's 504 after upstream.timeout: the interim responses count within the deadline of the
// response head, which they do not renew.
TEST(HostileInput, EndlessInterimResponsesEndInA504AfterTheTimeout) {
    constexpr auto timeout = 1000ms;
    recording_upstream upstream([timeout](const recorded_request&) {
        response_plan plan;
        plan.interim = "HTTP/1.1 100 Continue\r\n\r\n";
        plan.interim_every = timeout / 2;
        return plan;
    });
    sluice_config config = config_for(upstream);
    config.upstream_timeout = "1000ms";
    sluice_process sluice(config);
    // The timer is never early (timed_stream), and late by little more than the scheduling of a
    // loaded two-core machine under sanitizers: half a timeout covers that, and is far short of
    // the forever an interim response per half timeout kept the request before.
    constexpr auto slack = timeout / 2;
    http_connection connection(sluice.port(), timeout + slack + 2s);
    const auto start = std::chrono::steady_clock::now();
    connection.send("GET", "/endless");
    error_code ec;
    const auto response = connection.try_read_response(ec);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(response) << "no response: " << ec.message();
    EXPECT_EQ(response->status, 504u);
    EXPECT_GE(elapsed, timeout);
    EXPECT_LT(elapsed, timeout + slack);
}

// 17 103 Early Hints, one more than sluice takes before a final response: the client gets no
// more than 16 of them, then a 502 (a final response after interim ones is well-formed).
TEST(HostileInput, TooManyInterimResponsesEndInA502) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        for (int i = 0; i < 17; ++i) {
            plan.interim += "HTTP/1.1 103 Early Hints\r\nLink: </" + std::to_string(i) +
                            ".css>; rel=preload\r\n\r\n";
        }
        return plan;
    });
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port(), 5s);
    connection.send("GET", "/hints");
    unsigned hints = 0;
    error_code ec;
    for (;;) {
        const auto response = connection.try_read_response(ec);
        ASSERT_TRUE(response) << "no response after " << hints << " 103: " << ec.message();
        if (response->status != 103) {
            EXPECT_EQ(response->status, 502u);
            break;
        }
        ++hints;
        ASSERT_LE(hints, 17u);
    }
    EXPECT_LE(hints, 16u);
}

// --- 19: absolute-form targets -------------------------------------------------------------------

TEST(HostileInput, AbsoluteFormBecomesOriginFormWithItsAuthority) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port(), 10s);
    connection.send_raw("GET http://evil.example/x?q=1 HTTP/1.1\r\nHost: good\r\n\r\n");
    EXPECT_EQ(connection.read_response().status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(1, 10s));
    const auto seen = upstream.requests().at(0);
    EXPECT_EQ(seen.target, "/x?q=1");
    EXPECT_EQ(seen.header("Host"), "evil.example");
    EXPECT_EQ(count_header(seen.headers, "Host"), 1u);
    EXPECT_TRUE(sluice.wait_for_log("path=/x ", 5s)) << sluice.log_text();
}

TEST(HostileInput, InvalidAbsoluteFormGets400) {
    for (const char* target : {"http:///x", "http://user@evil.example/x", "ftp://evil.example/x"}) {
        recording_upstream upstream;
        sluice_process sluice(yaml_for(upstream));
        http_connection connection(sluice.port(), 10s);
        connection.send_raw(std::string("GET ") + target + " HTTP/1.1\r\nHost: good\r\n\r\n");
        EXPECT_EQ(connection.read_response().status, 400u) << target;
        ASSERT_TRUE(upstream.wait_quiet(5s));
        EXPECT_EQ(upstream.stats().headers_received, 0u) << target;
    }
}

} // namespace
} // namespace sluice::test
