// SPDX-License-Identifier: Apache-2.0
#include "http/response_figures.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::http::detail {
namespace {

config::cost_source json_source(std::string_view path) {
    config::cost_source s;
    s.what = config::cost_source::kind::json;
    s.json = *parse_json_path(path);
    return s;
}

config::cost_source header_source(std::string name) {
    config::cost_source s;
    s.what = config::cost_source::kind::header;
    s.header = std::move(name);
    return s;
}

/// Feeds `body` in pieces of `piece` bytes (0: whole) and returns the figure of source 0.
std::optional<std::string> figure_of(std::string_view type,
                                     std::string_view body,
                                     std::size_t piece = 0,
                                     std::uint64_t max = 1024,
                                     std::string_view encoding = {}) {
    const auto source = json_source("usage.total_tokens");
    const config::cost_source* sources[] = {&source};
    response_figures scan(sources, type, encoding, max);
    if (piece == 0) {
        scan.feed(body);
    } else {
        for (std::size_t at = 0; at < body.size(); at += piece) {
            scan.feed(body.substr(at, piece));
        }
    }
    return scan.figure(0);
}

constexpr std::string_view document = R"({"id":"x","usage":{"total_tokens":12}})";

TEST(ResponseFigures, AJsonDocumentGivesItsFigureWhateverItsPieces) {
    for (std::size_t piece : {0, 1, 2, 7}) {
        EXPECT_EQ(figure_of("application/json", document, piece), "12") << piece;
    }
    EXPECT_EQ(figure_of("Application/JSON; charset=utf-8", document), "12");
    EXPECT_EQ(figure_of("application/problem+json", document), "12");
}

TEST(ResponseFigures, OtherTypesEncodedBodiesAndOversizedDocumentsGiveNone) {
    EXPECT_EQ(figure_of("text/plain", document), std::nullopt);
    EXPECT_EQ(figure_of("", document), std::nullopt);
    EXPECT_EQ(figure_of("application/json", document, 0, 1024, "gzip"), std::nullopt);
    EXPECT_EQ(figure_of("application/json", document, 0, 1024, "identity"), "12");
    EXPECT_EQ(figure_of("application/json", document, 3, document.size() - 1), std::nullopt);
    EXPECT_EQ(figure_of("application/json", document, 3, document.size()), "12");
    EXPECT_EQ(figure_of("application/json", R"({"usage":{"total_tokens":"12"}})"), std::nullopt);
    EXPECT_EQ(figure_of("application/json", R"({"usage":{"total_tokens":12})"), std::nullopt);
}

constexpr std::string_view stream = "data: {\"usage\":{\"total_tokens\":3}}\n\n"
                                    ": keep-alive\n\n"
                                    "event: message\r\ndata: {\"choices\":[],\r\n"
                                    "data:  \"usage\":{\"total_tokens\":9}}\r\n\r\n"
                                    "data: {\"choices\":[]}\r\r"
                                    "data: [DONE]\n\n";

TEST(ResponseFigures, TheLastEventCarryingThePathCountsWhateverTheLineEndsAndPieces) {
    // The second event spans two data lines (joined by a newline, still JSON) and CRLF ends;
    // the later events do not carry the path.
    for (std::size_t piece : {0, 1, 2, 5, 13}) {
        EXPECT_EQ(figure_of("text/event-stream", stream, piece), "9") << piece;
    }
}

TEST(ResponseFigures, AnEventTheStreamDidNotEndCountsForNothing) {
    const std::string cut = std::string(stream) + "data: {\"usage\":{\"total_tokens\":50}}\n";
    EXPECT_EQ(figure_of("text/event-stream", cut), "9");
    // A later event that carries the path with no number takes the figure away.
    const std::string nulled =
        std::string(stream) + "data: {\"usage\":{\"total_tokens\":null}}\n\n";
    EXPECT_EQ(figure_of("text/event-stream", nulled), std::nullopt);
}

TEST(ResponseFigures, AnEventPastTheBoundIsDroppedAndTheNextOneCounts) {
    const std::string big =
        "data: {\"usage\":{\"total_tokens\":77},\"pad\":\"" + std::string(200, 'x') + "\"}\n\n";
    const std::string body = "data: {\"usage\":{\"total_tokens\":5}}\n\n" + big;
    EXPECT_EQ(figure_of("text/event-stream", body, 0, 100), "5");
    EXPECT_EQ(figure_of("text/event-stream", body, 7, 100), "5");
    // An oversized line in the middle of an event loses that event, not the next one.
    const std::string split = "data: " + std::string(200, 'y') +
                              "\ndata: {\"usage\":{\"total_tokens\":6}}\n\n"
                              "data: {\"usage\":{\"total_tokens\":8}}\n\n";
    EXPECT_EQ(figure_of("text/event-stream", split, 0, 100), "8");
    EXPECT_EQ(figure_of("text/event-stream", split, 9, 100), "8");
}

TEST(ResponseFigures, HeaderSourcesAreLeftToTheCallerAndPathsAreShared) {
    const auto a = json_source("usage.total_tokens");
    const auto h = header_source("X-Usage");
    const auto b = json_source("usage.total_tokens");
    const config::cost_source* sources[] = {&a, &h, &b};
    response_figures scan(sources, "application/json", {}, 1024);
    EXPECT_TRUE(scan.active());
    scan.feed(document);
    EXPECT_EQ(scan.figure(0), "12");
    EXPECT_EQ(scan.figure(1), std::nullopt);
    EXPECT_EQ(scan.figure(2), "12");
    const config::cost_source* only_header[] = {&h};
    EXPECT_FALSE(response_figures(only_header, "application/json", {}, 1024).active());
}

} // namespace
} // namespace sluice::http::detail
