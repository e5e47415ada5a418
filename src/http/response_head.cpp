// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/response_head.hpp"

#include "sluice/core/text.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/status.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>

namespace sluice::http {

namespace bhttp = beast::http;

response_head::~response_head() {
    while (blocks_ != nullptr) {
        auto* block = blocks_;
        blocks_ = block->previous;
        memory_->deallocate(block, block->size, alignof(text_block));
    }
}

void response_head::clear() noexcept {
    status = 0;
    version = 11;
    reason_ = {};
    fields_.clear();
}

std::string_view response_head::reason() const noexcept {
    if (!reason_.empty()) {
        return reason_;
    }
    const auto phrase = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
    return {phrase.data(), phrase.size()};
}

std::string_view response_head::keep(std::string_view text) {
    if (text.empty()) {
        return {};
    }
    // From a block of the head's own: the memory resource's allocate is a virtual call, and a
    // head's strings are a dozen small pieces.
    if (text.size() > room_) {
        const auto size = sizeof(text_block) + std::max(text.size(), text_block_size);
        auto* block = static_cast<text_block*>(memory_->allocate(size, alignof(text_block)));
        block->previous = blocks_;
        block->size = size;
        blocks_ = block;
        next_ = reinterpret_cast<char*>(block + 1);
        room_ = size - sizeof(text_block);
    }
    std::memcpy(next_, text.data(), text.size());
    const std::string_view copy(next_, text.size());
    next_ += text.size();
    room_ -= text.size();
    return copy;
}

void response_head::add(bhttp::field name, std::string_view name_string, std::string_view value) {
    add_in_place(name, keep(name_string), keep(value));
}

void response_head::add_in_place(bhttp::field name,
                                 std::string_view name_string,
                                 std::string_view value) {
    if (fields_.empty()) {
        fields_.reserve(8); // a usual response's fields, without growing
    }
    fields_.emplace_back(name, name_string, value);
}

void response_head::keep_read_bytes(std::string_view bytes) {
    const auto copy = keep(bytes);
    // A view into `bytes` (an empty one may sit at their end), moved to the copy; any other,
    // copied before, stays. By address, as integers: the views may point anywhere.
    const auto start = reinterpret_cast<std::uintptr_t>(bytes.data());
    const auto moved = [&](std::string_view view) {
        const auto offset = reinterpret_cast<std::uintptr_t>(view.data()) - start;
        return offset <= bytes.size() ? std::string_view(copy.data() + offset, view.size()) : view;
    };
    reason_ = moved(reason_);
    for (auto& f : fields_) {
        f = head_field(f.name(), moved(f.name_string()), moved(f.value()));
    }
}

const head_field* response_head::find(std::string_view name) const noexcept {
    for (const auto& f : fields_) {
        if (iequals(f.name_string(), name)) {
            return &f;
        }
    }
    return nullptr;
}

const head_field* response_head::find(bhttp::field name) const noexcept {
    for (const auto& f : fields_) {
        if (f.name() == name) {
            return &f;
        }
    }
    return nullptr;
}

std::string_view response_head::value_of(bhttp::field name) const noexcept {
    const auto* f = find(name);
    return f != nullptr ? f->value() : std::string_view{};
}

namespace {

// The last element of a Transfer-Encoding list (empty for an empty list).
std::string_view last_coding(std::string_view list) {
    std::string_view last;
    for (const auto token : bhttp::token_list{list}) {
        last = {token.data(), token.size()};
    }
    return last;
}

} // namespace

bool response_head::chunked() const noexcept {
    return iequals(last_coding(value_of(bhttp::field::transfer_encoding)), "chunked");
}

void response_head::set_chunked(bool chunked) {
    const auto* te = find(bhttp::field::transfer_encoding);
    // The new Transfer-Encoding list, when it changes (empty: no field).
    std::optional<std::string> list;
    if (chunked) {
        if (te == nullptr) {
            list = "chunked";
        } else if (!iequals(last_coding(te->value()), "chunked")) {
            list = std::string(te->value()) + ", chunked";
        }
    } else if (te != nullptr) {
        // Without its last element when that is "chunked" (Beast's filter_token_list_last),
        // re-joined with ", ".
        list.emplace();
        const bhttp::token_list tokens{te->value()};
        for (auto it = tokens.begin(); it != tokens.end();) {
            const std::string_view token{it->data(), it->size()};
            const bool last = ++it == tokens.end();
            if (last && iequals(token, "chunked")) {
                break;
            }
            list->append(list->empty() ? "" : ", ").append(token);
        }
    }
    // A chunked body has no length, and one ended by the connection's close says none: Beast's
    // message::chunked takes Content-Length away in either case.
    remove_if([replaced = list.has_value()](const head_field& f) {
        return f.name() == bhttp::field::content_length ||
               (replaced && f.name() == bhttp::field::transfer_encoding);
    });
    if (list && !list->empty()) {
        add(bhttp::field::transfer_encoding, "Transfer-Encoding", *list);
    }
}

void response_head::set_single_content_length(std::uint64_t length) {
    const auto is_length = [](const head_field& f) {
        return f.name() == bhttp::field::content_length;
    };
    const auto first = std::find_if(fields_.begin(), fields_.end(), is_length);
    if (first == fields_.end()) {
        return;
    }
    const auto later = std::find_if(std::next(first), fields_.end(), is_length);
    if (later == fields_.end() && first->value().find(',') == std::string_view::npos) {
        return; // one plain value: nearly every head
    }
    *first = head_field(first->name(), first->name_string(), keep(std::to_string(length)));
    fields_.erase(std::remove_if(later, fields_.end(), is_length), fields_.end());
}

} // namespace sluice::http
