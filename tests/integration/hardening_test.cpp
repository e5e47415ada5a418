// SPDX-License-Identifier: Apache-2.0
// Requests shaped like smuggling attempts or resource abuse are refused by sluice itself
// (400/431/414/413) and nothing of them reaches the upstream.

#include "integration_util.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <string>
#include <sys/socket.h>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

struct malformed_case {
    const char* name;
    std::string bytes;
};

// Names the case in gtest's messages instead of dumping its bytes.
void PrintTo(const malformed_case& c, std::ostream* os) {
    *os << c.name;
}

std::string case_name(const testing::TestParamInfo<malformed_case>& info) {
    return info.param.name;
}

/// Each request as "METHOD TARGET" and its header fields (values quoted), for failure messages.
std::string describe(const std::vector<recorded_request>& requests) {
    std::string text;
    for (const auto& r : requests) {
        text += r.method + " " + r.target + " (body " + std::to_string(r.body_size) + " B)\n";
        for (const auto& [name, value] : r.headers) {
            text += "  " + name + ": \"" + value + "\"\n";
        }
    }
    return text;
}

// Asserts that the upstream saw nothing but one probe sent on a fresh connection afterwards.
void expect_only_probe_reached_upstream(const sluice_process& sluice,
                                        const recording_upstream& upstream) {
    EXPECT_EQ(get(sluice.port(), "/probe").status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(1, 10s));
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 1u) << "the upstream saw:\n" << describe(requests);
    EXPECT_EQ(requests[0].target, "/probe");
    // Whatever sluice sent for the bad request was sent before its answer; let it be counted.
    ASSERT_TRUE(upstream.wait_quiet(5s));
    const upstream_stats stats = upstream.stats();
    EXPECT_EQ(stats.headers_received, 1u) << "a request header reached the upstream";
    EXPECT_EQ(stats.broken, 0u) << "the upstream saw a broken or partial request";
}

/// Whether Beast's own request parser accepts `bytes` as a complete request.
bool beast_accepts(const std::string& bytes) {
    namespace http = boost::beast::http;
    http::request_parser<http::empty_body> parser;
    parser.eager(true);
    error_code ec;
    parser.put(boost::asio::buffer(bytes), ec);
    return !ec && parser.is_done();
}

class Malformed : public testing::TestWithParam<malformed_case> {};

TEST_P(Malformed, Gets400AndNothingReachesUpstream) {
    const auto& bytes = GetParam().bytes;
    if (std::string(GetParam().name) == "BareLineFeedRequestLine" && beast_accepts(bytes)) {
        GTEST_SKIP() << "Beast accepts a bare LF, so sluice is not expected to reject it";
    }
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));

    http_connection connection(sluice.port(), 10s);
    connection.send_raw(bytes);
    error_code ec;
    const auto response = connection.try_read_response(ec);
    ASSERT_TRUE(response) << "no response: " << ec.message();
    EXPECT_EQ(response->status, 400u);
    // After a framing error the connection cannot be trusted: sluice must close it.
    EXPECT_TRUE(connection.wait_closed(5s));
    expect_only_probe_reached_upstream(sluice, upstream);
}

const std::string post = "POST /smuggle HTTP/1.1\r\nHost: 127.0.0.1\r\n";

/// A GET whose Host field has the value `host`.
std::string host_line(const std::string& host) {
    return "GET /host HTTP/1.1\r\nHost: " + host + "\r\n\r\n";
}

INSTANTIATE_TEST_SUITE_P(
    Hardening,
    Malformed,
    testing::Values(
        malformed_case{"ContentLengthAndChunked",
                       post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
        malformed_case{"TwoDifferentContentLengths",
                       post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"},
        malformed_case{"UnknownTransferEncoding",
                       post + "Transfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
        // A coding before chunked: sluice frames by the chunks, and an upstream that took
        // "identity" for no coding at all would frame otherwise (both were forwarded before).
        malformed_case{"IdentityThenChunked",
                       post + "Transfer-Encoding: identity, chunked\r\n\r\n"
                              "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
        malformed_case{"GzipThenChunked",
                       post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
        malformed_case{"BadChunkSize",
                       post + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
        malformed_case{"ObsoleteLineFolding",
                       "GET /fold HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Folded: a\r\n b\r\n\r\n"},
        malformed_case{"BareLineFeedRequestLine", "GET /lf HTTP/1.1\nHost: 127.0.0.1\r\n\r\n"},
        malformed_case{"SpaceBeforeColon",
                       "GET /space HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Foo : bar\r\n\r\n"},
        // A Host must be uri-host [ ":" port ] (RFC 9110 7.2): nginx's "client sent invalid
        // host header". Anything else could route, cache or log the request as another host.
        malformed_case{"HostWithSpace", host_line("a b")},
        malformed_case{"HostWithTab", host_line("a\tb")},
        malformed_case{"HostWithControlByte", host_line("a\x01-b")},
        malformed_case{"HostWithSlash", host_line("evil.example/x")},
        malformed_case{"HostWithUserInfo", host_line("user@evil.example")},
        malformed_case{"HostWithQuery", host_line("evil.example?x")},
        malformed_case{"HostWithFragment", host_line("evil.example#x")},
        malformed_case{"HostWithBackslash", host_line("evil.example\\x")},
        malformed_case{"HostNonAscii", host_line("\xc3\xa9vil.example")},
        malformed_case{"HostList", host_line("a.example, b.example")},
        malformed_case{"HostPortNotDigits", host_line("a.example:8o")},
        malformed_case{"HostTwoPorts", host_line("a.example:80:81")},
        malformed_case{"HostPortAlone", host_line(":80")},
        malformed_case{"HostUnclosedBracket", host_line("[::1")},
        malformed_case{"HostEmpty", host_line("")},
        malformed_case{"TwoHostLines",
                       "GET /host HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n"}),
    case_name);

// A short header of many fields gets 431 too: each field is a record of its own in memory.
TEST(Hardening, AHeaderOfMoreThan256FieldsGets431) {
    recording_upstream upstream;
    sluice_config config = config_for(upstream);
    sluice_process sluice(config);

    header_list many;
    for (int i = 0; i < 300; ++i) {
        many.emplace_back("X-F" + std::to_string(i), "1");
    }
    const http_response response = get(sluice.port(), "/many-fields", many);
    EXPECT_EQ(response.status, 431u);
    expect_only_probe_reached_upstream(sluice, upstream);
}

TEST(Hardening, HugeHeaderGets431) {
    recording_upstream upstream;
    sluice_config config = config_for(upstream);
    config.max_header_size = 1024;
    sluice_process sluice(config);

    const http_response response =
        get(sluice.port(), "/big-header", {{"X-Big", std::string(4096, 'a')}});
    EXPECT_EQ(response.status, 431u);
    expect_only_probe_reached_upstream(sluice, upstream);
}

TEST(Hardening, LongUriGets414) {
    recording_upstream upstream;
    sluice_config config = config_for(upstream);
    config.max_uri_length = 1024;
    sluice_process sluice(config);

    const http_response response = get(sluice.port(), "/" + std::string(2048, 'u'));
    EXPECT_EQ(response.status, 414u);
    expect_only_probe_reached_upstream(sluice, upstream);
}

TEST(Hardening, DeclaredBodyOverLimitGets413) {
    recording_upstream upstream;
    sluice_config config = config_for(upstream);
    config.max_body_size = 1024;
    sluice_process sluice(config);

    // Only the header: sluice must decide from Content-Length, before any body byte.
    http_connection connection(sluice.port(), 10s);
    connection.send_raw(format_request("POST", "/upload", {{"Content-Length", "2048"}}));
    EXPECT_EQ(connection.read_response().status, 413u);
    expect_only_probe_reached_upstream(sluice, upstream);
}

TEST(Hardening, ChunkedBodyOverLimitGets413) {
    recording_upstream upstream;
    sluice_config config = config_for(upstream);
    config.max_body_size = 1024;
    sluice_process sluice(config);

    // One 2 KiB chunk and no last chunk: sluice has to count the bytes as they stream. Nothing
    // is left unread when it answers, so its close cannot reset the response away.
    http_connection connection(sluice.port(), 10s);
    connection.send_raw(format_request("POST", "/upload", {{"Transfer-Encoding", "chunked"}}) +
                        "800\r\n" + std::string(2048, 'b') + "\r\n");
    EXPECT_EQ(connection.read_response().status, 413u);
    expect_only_probe_reached_upstream(sluice, upstream);
}

// A client that sends half of a body that fits server.request-buffer-size (16 KiB by default)
// and leaves: nothing of its request reaches the upstream. Streamed from its first block, as
// before the buffer, its header and first 500 bytes went upstream, and the upstream saw an
// incomplete request cut off.
TEST(Hardening, BodyCutShortWithinRequestBufferNeverReachesUpstream) {
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));

    {
        http_connection connection(sluice.port(), 10s);
        connection.send_raw(format_request("POST", "/upload", {{"Content-Length", "1000"}}) +
                            std::string(500, 'b'));
        ::shutdown(connection.stream().native_handle(), SHUT_WR);
        EXPECT_TRUE(connection.wait_closed(5s));
    }
    expect_only_probe_reached_upstream(sluice, upstream);
}

// A body larger than server.request-buffer-size streams on after its buffered first part: it
// arrives whole and unchanged, with a Content-Length or chunked, and so does one that fits.
TEST(Hardening, BodiesAroundTheRequestBufferArriveWhole) {
    recording_upstream upstream;
    sluice_config config = config_for(upstream);
    config.request_buffer_size = 1024;
    sluice_process sluice(config);

    const std::vector<std::size_t> sizes = {1023, 1024, 1025, 100 * 1024 + 7};
    std::size_t seed = 1;
    for (const auto size : sizes) {
        for (const bool chunked : {false, true}) {
            http_connection connection(sluice.port(), 10s);
            const header_list framing = chunked
                                            ? header_list{{"Transfer-Encoding", "chunked"}}
                                            : header_list{{"Content-Length", std::to_string(size)}};
            connection.send_raw(format_request("POST", "/upload/" + std::to_string(seed), framing));
            connection.send_pattern_body(seed, size, chunked, 700);
            EXPECT_EQ(connection.read_response().status, 200u) << size << " chunked " << chunked;
            ++seed;
        }
    }
    ASSERT_TRUE(upstream.wait_for_count(2 * sizes.size(), 10s));
    seed = 1;
    for (const auto size : sizes) {
        for (const bool chunked : {false, true}) {
            const auto target = "/upload/" + std::to_string(seed);
            const auto requests = upstream.requests();
            const auto it = std::find_if(requests.begin(), requests.end(), [&](const auto& r) {
                return r.target == target;
            });
            ASSERT_NE(it, requests.end()) << target;
            EXPECT_EQ(it->body_size, size) << target;
            EXPECT_EQ(it->body_hash, pattern_hash(seed, size)) << target << " chunked " << chunked;
            ++seed;
        }
    }
}

// A client that waits for 100 Continue before its body (curl does for large bodies) gets one,
// from sluice, whether the body is buffered (it fits server.request-buffer-size), buffered in
// part, or streamed (0); the body then reaches the upstream whole, without the Expect field,
// whose answer was sluice's to give.
TEST(Hardening, ExpectContinueGetsOne100AndTheBodyArrivesWhole) {
    recording_upstream upstream;
    std::uint64_t seed = 1;
    for (const std::uint64_t buffer : {std::uint64_t{4096}, std::uint64_t{0}}) {
        sluice_config config = config_for(upstream);
        config.request_buffer_size = buffer;
        sluice_process sluice(config);
        for (const std::size_t size : {std::size_t{1000}, std::size_t{100 * 1024 + 7}}) {
            http_connection connection(sluice.port(), 10s);
            const auto target = "/expect/" + std::to_string(seed);
            connection.send_raw(format_request(
                "POST",
                target,
                {{"Expect", "100-continue"}, {"Content-Length", std::to_string(size)}}));
            EXPECT_EQ(connection.read_response().status, 100u) << "buffer " << buffer;
            connection.send_pattern_body(seed, size, false, 700);
            EXPECT_EQ(connection.read_response().status, 200u)
                << "buffer " << buffer << ", body " << size;
            ASSERT_TRUE(upstream.wait_for_count(seed, 10s));
            const auto got = upstream.requests().back();
            EXPECT_EQ(got.target, target);
            EXPECT_EQ(got.body_size, size) << target;
            EXPECT_EQ(got.body_hash, pattern_hash(seed, size)) << target;
            EXPECT_FALSE(got.header("Expect")) << target;
            ++seed;
        }
    }
}

TEST(Hardening, BodyWithinLimitPasses) {
    recording_upstream upstream;
    sluice_config config = config_for(upstream);
    config.max_body_size = 1024;
    sluice_process sluice(config);

    const std::string body(1024, 'c');
    EXPECT_EQ(request(sluice.port(), "POST", "/upload", {}, body).status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(1, 10s));
    EXPECT_EQ(upstream.requests().at(0).body_hash, hash_of(body));
}

} // namespace
} // namespace sluice::test
