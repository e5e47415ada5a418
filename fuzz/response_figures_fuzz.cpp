// SPDX-License-Identifier: Apache-2.0
// The `json:` figures of a response body (issue 15): the JSON field finder (RapidJSON's SAX
// reader and the path followers) and the event-stream splitter, over arbitrary bodies. The
// input's first byte picks the body's type (bit 0: text/event-stream, else application/json)
// and the size of the pieces it is fed in (the other bits); the rest is the body. Properties:
// the figure does not depend on how the body was cut into pieces, and a figure is a number as
// JSON writes one (so it starts with '-' or a digit). Each figure, and the body's first line as
// a header's value, go through parse_cost_figure, whose amount is within [0, 2^53].
#include "http/response_figures.hpp"
#include "sluice/limiter/cost.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace config = sluice::config;

namespace {

using sluice::http::detail::response_figures;

config::cost_source json_source(std::string_view path) {
    config::cost_source s;
    s.what = config::cost_source::kind::json;
    s.json = *sluice::parse_json_path(path);
    return s;
}

struct figures {
    std::optional<std::string> a;
    std::optional<std::string> b;
};

figures scan(std::string_view type, std::string_view body, std::size_t piece) {
    static const auto usage = json_source("usage.total_tokens");
    static const auto indexed = json_source("a.0");
    const config::cost_source* sources[] = {&usage, &indexed};
    // A small bound, so that inputs also reach the oversized paths.
    response_figures f(sources, type, {}, 256);
    for (std::size_t at = 0; at < body.size(); at += piece) {
        f.feed(body.substr(at, piece));
    }
    return {f.figure(0), f.figure(1)};
}

void check_amount(std::string_view text) {
    const auto amount = sluice::limiter::parse_cost_figure(text);
    if (amount && (*amount < 0 || *amount > sluice::limiter::max_amount)) {
        std::fprintf(stderr,
                     "response_figures_fuzz: an amount out of range: %lld\n",
                     static_cast<long long>(*amount));
        std::abort();
    }
}

void check_number(const std::optional<std::string>& figure) {
    if (figure && (figure->empty() ||
                   (figure->front() != '-' && (figure->front() < '0' || figure->front() > '9')))) {
        std::fprintf(
            stderr, "response_figures_fuzz: a figure that is no number: %s\n", figure->c_str());
        std::abort();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const auto control = data[0];
    const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::string_view type = (control & 1) != 0 ? "text/event-stream" : "application/json";
    const std::size_t piece = 1 + (control >> 1);
    const auto whole = scan(type, body, body.size() + 1);
    const auto cut = scan(type, body, piece);
    if (whole.a != cut.a || whole.b != cut.b) {
        std::fprintf(
            stderr, "response_figures_fuzz: the pieces (%zu bytes) changed a figure\n", piece);
        std::abort();
    }
    check_number(whole.a);
    check_number(whole.b);
    for (const auto& figure : {whole.a, whole.b}) {
        if (figure) {
            check_amount(*figure);
        }
    }
    check_amount(body.substr(0, body.find('\n')));
    return 0;
}
