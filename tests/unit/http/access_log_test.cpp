// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/access_log.hpp"

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

namespace sluice::http {
namespace {

using format = config::logging_settings::format_kind;
using std::chrono::milliseconds;

access_record forwarded() {
    access_record r;
    r.client = "203.0.113.7";
    r.method = "GET";
    r.path = "/v1/x";
    r.key = "rate-limit:203.0.113.7:/v1/x";
    r.decision = "delayed";
    r.status = 200;
    r.upstream_time = milliseconds(12);
    r.delay = milliseconds(400);
    return r;
}

TEST(FormatAccess, TextIsOneLineOfNameValuePairs) {
    EXPECT_EQ(format_access(forwarded(), format::text),
              "client=203.0.113.7 method=GET path=/v1/x key=rate-limit:203.0.113.7:/v1/x "
              "decision=delayed status=200 upstream_ms=12 delay_ms=400 end=-");
}

TEST(FormatAccess, TextShowsDashesForWhatDidNotHappen) {
    access_record r;
    r.client = "::1";
    r.method = "GET";
    r.path = "/bad path";
    EXPECT_EQ(format_access(r, format::text),
              "client=::1 method=GET path=/bad%20path key=- decision=- status=- upstream_ms=- "
              "delay_ms=0 end=-");
}

// Every byte past ASCII is escaped in the text format: UTF-8 (`é`, a NEL that a viewer would
// break the line at) and bytes that are no UTF-8 alike.
TEST(FormatAccess, TextEscapesEveryByteBeyondAscii) {
    auto r = forwarded();
    r.key = "rate-limit:203.0.113.7:caf\xC3\xA9\xC2\x85\xFF~";
    EXPECT_NE(
        format_access(r, format::text).find(" key=rate-limit:203.0.113.7:caf%C3%A9%C2%85%FF~ "),
        std::string::npos)
        << format_access(r, format::text);
}

// '%' is escaped too, so that a raw line feed (%0A) and a target that says "%0A" (%250A) do not
// log alike, and the escaping can be undone.
TEST(FormatAccess, TextEscapesThePercentSignSoThatEscapesAreUnambiguous) {
    auto raw = forwarded();
    raw.path = "/a\nb";
    auto literal = forwarded();
    literal.path = "/a%0Ab";
    const auto raw_line = format_access(raw, format::text);
    const auto literal_line = format_access(literal, format::text);
    EXPECT_NE(raw_line.find(" path=/a%0Ab "), std::string::npos) << raw_line;
    EXPECT_NE(literal_line.find(" path=/a%250Ab "), std::string::npos) << literal_line;
    EXPECT_NE(raw_line, literal_line);
}

TEST(FormatAccess, JsonIsObjectMembersWithEscapedStrings) {
    auto r = forwarded();
    r.path = R"(/a"b)";
    EXPECT_EQ(format_access(r, format::json),
              R"("client":"203.0.113.7","method":"GET","path":"/a\"b",)"
              R"("key":"rate-limit:203.0.113.7:/v1/x","decision":"delayed",)"
              R"("status":200,"upstream_ms":12,"delay_ms":400,"end":"-")");
}

TEST(FormatAccess, SaysWhenTheClientLeftMidResponse) {
    auto r = forwarded();
    r.end = "client_left";
    EXPECT_NE(format_access(r, format::text).find(" end=client_left"), std::string::npos);
    EXPECT_NE(format_access(r, format::json).find(R"("end":"client_left")"), std::string::npos);
}

// Each line is written whole in the format in force when it is written: its fields and its
// logger (whose formatter frames the fields) are chosen by the one value `set` changes, never a
// request's own idea of the format, so a change between two lines never mixes them.
TEST(AccessLog, WritesEachLineWholeInTheFormatInForce) {
    std::ostringstream text_out;
    std::ostringstream json_out;
    const auto logger = [](std::ostringstream& out, const char* pattern) {
        auto l = std::make_shared<spdlog::logger>(
            "access", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
        l->set_pattern(pattern);
        return l;
    };
    access_log log(logger(text_out, "[text] %v"), logger(json_out, "{%v}"));
    log.set(format::text, true);
    log.write(forwarded());
    log.set(format::json, true);
    log.write(forwarded());
    log.set(format::json, false);
    log.write(forwarded());
    EXPECT_EQ(text_out.str(), "[text] " + format_access(forwarded(), format::text) + "\n");
    EXPECT_EQ(json_out.str(), "{" + format_access(forwarded(), format::json) + "}\n");
}

} // namespace
} // namespace sluice::http
