// SPDX-License-Identifier: Apache-2.0
#include "http/response_figures.hpp"

#include "sluice/core/text.hpp"

#include <algorithm>

namespace sluice::http::detail {
namespace {

// The media type of a Content-Type value, without its parameters.
std::string_view media_type(std::string_view content_type) noexcept {
    return trim_blanks(content_type.substr(0, content_type.find(';')));
}

bool is_json(std::string_view type) noexcept {
    if (iequals(type, "application/json")) {
        return true;
    }
    // application/problem+json, application/vnd.api+json ...
    return type.size() > 5 && iequals(type.substr(type.size() - 5), "+json") &&
           type.find('/') != std::string_view::npos;
}

} // namespace

response_figures::response_figures(std::span<const config::cost_source* const> sources,
                                   std::string_view content_type,
                                   std::string_view content_encoding,
                                   std::uint64_t max_bytes)
    : max_bytes_(max_bytes) {
    for (const auto* source : sources) {
        int index = -1;
        if (source->what == config::cost_source::kind::json) {
            const auto same = [source](const json_path* p) {
                return p->text == source->json.text;
            };
            const auto found = std::find_if(paths_.begin(), paths_.end(), same);
            index = static_cast<int>(found - paths_.begin());
            if (found == paths_.end()) {
                paths_.push_back(&source->json);
            }
        }
        path_of_.push_back(index);
    }
    values_.resize(paths_.size());
    figures_.resize(paths_.size());
    const auto encoding = trim_blanks(content_encoding);
    if (paths_.empty() || (!encoding.empty() && !iequals(encoding, "identity"))) {
        return;
    }
    const auto type = media_type(content_type);
    if (is_json(type)) {
        mode_ = mode::document;
    } else if (iequals(type, "text/event-stream")) {
        mode_ = mode::events;
    }
}

void response_figures::feed(std::string_view block) {
    if (mode_ == mode::document) {
        if (overflow_ || block.size() > max_bytes_ - kept_.size()) {
            overflow_ = true;
            kept_.clear();
            kept_.shrink_to_fit();
            return;
        }
        kept_.append(block);
        return;
    }
    if (mode_ != mode::events) {
        return;
    }
    // Lines end in CRLF, LF or CR (the event-stream grammar).
    while (!block.empty()) {
        if (after_cr_ && block.front() == '\n') {
            block.remove_prefix(1);
        }
        after_cr_ = false;
        const auto end = block.find_first_of("\r\n");
        const auto piece = block.substr(0, end);
        line_started_ = line_started_ || !piece.empty();
        // Only a data line is kept; a line that would take the event past the bound makes it
        // one without a figure, and nothing more of it is kept.
        if (!overflow_) {
            if (piece.size() > max_bytes_ - std::min<std::uint64_t>(max_bytes_, line_.size())) {
                overflow_ = true;
                line_.clear();
                kept_.clear();
            } else {
                line_.append(piece);
            }
        }
        if (end == std::string_view::npos) {
            return;
        }
        after_cr_ = block[end] == '\r';
        block.remove_prefix(end + 1);
        end_line();
    }
}

void response_figures::end_line() {
    const bool blank = !line_started_;
    line_started_ = false;
    if (blank) {
        end_event();
        return;
    }
    std::string_view line(line_);
    const auto colon = line.find(':');
    if (!overflow_ && line.substr(0, colon) == "data") {
        auto value = colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
        if (!value.empty() && value.front() == ' ') {
            value.remove_prefix(1);
        }
        if (value.size() + 1 > max_bytes_ - std::min<std::uint64_t>(max_bytes_, kept_.size())) {
            overflow_ = true;
            kept_.clear();
        } else {
            kept_.append(value);
            kept_.push_back('\n');
        }
    }
    line_.clear();
}

void response_figures::end_event() {
    if (!overflow_ && !kept_.empty()) {
        kept_.pop_back(); // the '\n' after the last data line
        // `data: [DONE]` and other events that are not JSON carry nothing.
        if (find_json_fields(kept_, paths_, values_)) {
            take_values();
        }
    }
    kept_.clear();
    overflow_ = false;
}

void response_figures::take_values() {
    for (std::size_t p = 0; p < paths_.size(); ++p) {
        const auto& v = values_[p];
        if (v.what == json_scalar::kind::absent) {
            continue;
        }
        figures_[p] =
            v.what == json_scalar::kind::number ? std::optional<std::string>(v.text) : std::nullopt;
    }
}

std::optional<std::string> response_figures::figure(std::size_t i) {
    if (!finished_) {
        finished_ = true;
        // An event the stream did not end with a blank line was never dispatched: a stream cut
        // short in its last event has no figure from it.
        if (mode_ == mode::document && !overflow_ && find_json_fields(kept_, paths_, values_)) {
            take_values();
        }
        kept_.clear();
        kept_.shrink_to_fit();
        line_.clear();
        line_.shrink_to_fit();
    }
    if (i >= path_of_.size() || path_of_[i] < 0) {
        return std::nullopt;
    }
    return figures_[static_cast<std::size_t>(path_of_[i])];
}

} // namespace sluice::http::detail
