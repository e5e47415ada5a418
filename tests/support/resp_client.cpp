// SPDX-License-Identifier: Apache-2.0
#include "support/resp_client.hpp"

#include <stdexcept>

namespace sluice::test {

std::string resp_value::describe() const {
    switch (type) {
    case kind::nil:
        return "nil";
    case kind::integer:
        return std::to_string(integer);
    case kind::string:
        return '"' + text + '"';
    case kind::status:
        return text;
    case kind::error:
        return "(error) " + text;
    case kind::array: {
        std::string out = "[";
        for (std::size_t i = 0; i < elements.size(); ++i) {
            out += (i == 0 ? "" : ", ") + elements[i].describe();
        }
        return out + "]";
    }
    }
    return "?";
}

resp_client::resp_client(std::uint16_t port, std::chrono::milliseconds timeout)
    : stream_(fd_stream::connect_loopback(port)) {
    stream_.timeout(timeout);
}

resp_value resp_client::command(const std::vector<std::string>& args) {
    std::string request = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& arg : args) {
        request += "$" + std::to_string(arg.size()) + "\r\n" + arg + "\r\n";
    }
    stream_.write_all(request);
    return read_value();
}

std::vector<std::pair<std::string, std::string>> resp_client::hgetall(const std::string& key) {
    const resp_value reply = command({"HGETALL", key});
    if (reply.type != resp_value::kind::array || reply.elements.size() % 2 != 0) {
        throw std::runtime_error("HGETALL " + key + ": " + reply.describe());
    }
    std::vector<std::pair<std::string, std::string>> fields;
    for (std::size_t i = 0; i < reply.elements.size(); i += 2) {
        fields.emplace_back(reply.elements[i].text, reply.elements[i + 1].text);
    }
    return fields;
}

bool resp_client::exists(const std::string& key) {
    const resp_value reply = command({"EXISTS", key});
    if (reply.type != resp_value::kind::integer) {
        throw std::runtime_error("EXISTS " + key + ": " + reply.describe());
    }
    return reply.integer == 1;
}

std::int64_t resp_client::time_ms() {
    const resp_value reply = command({"TIME"});
    if (reply.type != resp_value::kind::array || reply.elements.size() != 2) {
        throw std::runtime_error("TIME: " + reply.describe());
    }
    return std::stoll(reply.elements[0].text) * 1000 + std::stoll(reply.elements[1].text) / 1000;
}

std::string resp_client::read_line() {
    for (;;) {
        const auto end = buffer_.find("\r\n");
        if (end != std::string::npos) {
            std::string line = buffer_.substr(0, end);
            buffer_.erase(0, end + 2);
            return line;
        }
        char piece[4096];
        const std::size_t n = stream_.read_some(boost::asio::buffer(piece));
        buffer_.append(piece, n);
    }
}

resp_value resp_client::read_value() {
    const std::string line = read_line();
    if (line.empty()) {
        throw std::runtime_error("empty RESP line");
    }
    resp_value value;
    const std::string rest = line.substr(1);
    switch (line.front()) {
    case '+':
        value.type = resp_value::kind::status;
        value.text = rest;
        return value;
    case '-':
        value.type = resp_value::kind::error;
        value.text = rest;
        return value;
    case ':':
        value.type = resp_value::kind::integer;
        value.integer = std::stoll(rest);
        return value;
    case '$': {
        const long long size = std::stoll(rest);
        if (size < 0) {
            return value; // nil
        }
        const auto wanted = static_cast<std::size_t>(size) + 2; // the bytes and their CRLF
        while (buffer_.size() < wanted) {
            char piece[4096];
            const std::size_t n = stream_.read_some(boost::asio::buffer(piece));
            buffer_.append(piece, n);
        }
        value.type = resp_value::kind::string;
        value.text = buffer_.substr(0, static_cast<std::size_t>(size));
        buffer_.erase(0, wanted);
        return value;
    }
    case '*': {
        const long long count = std::stoll(rest);
        if (count < 0) {
            return value; // nil array
        }
        value.type = resp_value::kind::array;
        for (long long i = 0; i < count; ++i) {
            value.elements.push_back(read_value());
        }
        return value;
    }
    default:
        throw std::runtime_error("not a RESP2 reply: " + line);
    }
}

resp_value command_or_error(std::uint16_t port, const std::vector<std::string>& args) {
    try {
        resp_client c(port, std::chrono::seconds(2));
        return c.command(args);
    } catch (const std::exception& e) {
        resp_value v;
        v.type = resp_value::kind::error;
        v.text = e.what();
        return v;
    }
}

std::string info_field(const std::string& text, const std::string& field) {
    const auto at = text.find(field + ":");
    if (at == std::string::npos) {
        return {};
    }
    const auto begin = at + field.size() + 1;
    return text.substr(begin, text.find_first_of("\r\n", begin) - begin);
}

} // namespace sluice::test
